"""The execute-graph data contract and everything that reads or writes it.

schema (the field table FIELDS, enums, version), graph (`ExecuteGraph`), builder (`GraphBuilder`),
csr (jitted CSR passes), validate (`validate_graph`), io (`save_graph`, `load_graph`),
generators (synthetic graphs) and inspect (statistics).
"""
