"""The execute-graph data contract and everything that reads or writes it.

schema (tables, columns, enums, version), graph (`ExecuteGraph`), builder (`GraphBuilder`),
csr (jitted CSR passes), validate (`validate_graph`), io (`save_graph`, `load_graph`),
generators (synthetic graphs) and inspect (statistics).
"""
