"""Recurrent ops: LSTM, GRU and RNN (ONNX opsets 1 to 22), float32 / float64.

Inputs in ONNX order: X, W, R, B, sequence_lens, initial_h (LSTM: then initial_c, P); outputs
Y, Y_h (LSTM: then Y_c). A direction has G gates (LSTM 4: i o f c; GRU 3: z r h; RNN 1) of H
units, H being R's last dim. Layout 0: X [seq, batch, input], Y [seq, dirs, batch, H], the
states [dirs, batch, H]; layout 1: X [batch, seq, input], Y [batch, seq, dirs, H], the states
[batch, dirs, H].

Each direction projects every time step's input at once (X @ W^T, by BLAS above
`SMALL_PRODUCT` multiply-adds, plus the biases), then runs its steps in one jitted loop: the
recurrent product H @ R^T, then the gates and the state update of each batch row, in float64,
stored in the input's type. A batch row of sequence length L runs its steps 0 .. L - 1
(reverse: L - 1 down to 0); Y is zero past L, and Y_h / Y_c hold its state after its last step
(zeros when L is 0, as onnxruntime has it). A length outside [0, seq] fails the op with
STATUS_OP_BAD_INDEX. `clip` bounds every activation's input to [-clip, clip].

attrs: [direction (0 forward, 1 reverse, 2 bidirectional), hidden_size (-1: not given), layout,
clip (float; 0: none), flag (LSTM input_forget: f = 1 - i; GRU linear_before_reset), then six
activation codes (direction d's k-th function at ACTIVATIONS + d * 3 + k), their six alphas and
six betas (floats)]. `encode_recurrent` fills them from the ONNX attributes, consuming
activation_alpha / activation_beta in order by the functions that take them, with the ONNX
operators' defaults for the rest (as onnxruntime does).
"""

import numpy as np

from rtsoa._jit import jit_inline_ir, jit_inline_llvm, jit_with_nrt
from rtsoa.ops.abi import (
    F32,
    F64,
    FLOATS,
    I32,
    OK,
    RESULT_ROW,
    STATUS_OP_BAD_ATTRIBUTE,
    STATUS_OP_BAD_DTYPE,
    STATUS_OP_BAD_INDEX,
    STATUS_OP_BAD_SHAPE,
    STATUS_OP_TOO_LARGE,
    DType,
    dim,
    dtype,
    present,
    rank,
    set_dim,
    set_output,
    view,
)
from rtsoa.ops.copying import holds
from rtsoa.ops.linalg import SMALL_PRODUCT, _loop_product
from rtsoa.ops.recurrent_attributes import (
    ACTIVATIONS,
    AFFINE,
    ALPHAS,
    BETAS,
    CLIP,
    DIRECTION,
    ELU,
    FLAG,
    HARD_SIGMOID,
    HIDDEN,
    LAYOUT,
    LEAKY_RELU,
    RELU,
    SCALED_TANH,
    SIGMOID,
    SLOTS,
    SOFTPLUS,
    SOFTSIGN,
    TANH,
    THRESHOLDED_RELU,
    encode_recurrent,
)
from rtsoa.ops.registry import register_op
from rtsoa.ops.window import element_count

# -- activations and products -------------------------------------------------------------------


@jit_inline_llvm
def activate(code, alpha, beta, clip, x):
    """Activation `code` of x (float64), its input first bounded to [-clip, clip] (clip > 0)."""
    if clip > 0.0:
        x = min(max(x, -clip), clip)
    if code == SIGMOID:
        if x >= 0.0:
            return 1.0 / (1.0 + np.exp(-x))
        e = np.exp(x)
        return e / (1.0 + e)
    if code == TANH:
        return np.tanh(x)
    if code == RELU:
        return max(x, 0.0)
    if code == LEAKY_RELU:
        return x if x >= 0.0 else alpha * x
    if code == THRESHOLDED_RELU:
        return x if x > alpha else 0.0
    if code == SCALED_TANH:
        return alpha * np.tanh(beta * x)
    if code == HARD_SIGMOID:
        return min(max(alpha * x + beta, 0.0), 1.0)
    if code == ELU:
        return x if x >= 0.0 else alpha * (np.exp(x) - 1.0)
    if code == SOFTSIGN:
        return x / (1.0 + abs(x))
    if code == SOFTPLUS:
        return x + np.log1p(np.exp(-x)) if x > 0.0 else np.log1p(np.exp(x))
    return alpha * x + beta  # AFFINE


@jit_inline_ir
def _product(a, b, out, m, k, n):
    """out = a @ b on flat C-order operands (m x k, k x n): BLAS above SMALL_PRODUCT."""
    if m * n == 0:
        return
    if k > 0 and m * k * n > SMALL_PRODUCT:
        np.dot(a.reshape((m, k)), b.reshape((k, n)), out.reshape((m, n)))
    else:
        _loop_product(a, b, out, m, k, n)


@jit_with_nrt
def _transposed(matrix, start, rows, columns):
    """The rows x columns block of flat `matrix` from `start`, transposed (columns x rows)."""
    out = np.empty(rows * columns, dtype=matrix.dtype)
    for i in range(rows):
        for j in range(columns):
            out[j * rows + i] = matrix[start + i * columns + j]
    return out


@jit_with_nrt
def _projection(x, w, b, has_b, d, rows, width, gh, rb_columns):
    """Every time step's input projection of direction `d`: X @ W[d]^T (rows x gh), plus
    W's bias and R's bias of the first `rb_columns` columns (GRU may keep Rbh apart)."""
    w_t = _transposed(w, d * gh * width, gh, width)
    xw = np.empty(rows * gh, dtype=x.dtype)
    _product(x, w_t, xw, rows, width, gh)
    if has_b:
        base = d * 2 * gh
        for row in range(rows):
            for g in range(gh):
                bias = b[base + g] + (b[base + gh + g] if g < rb_columns else 0.0)
                xw[row * gh + g] += bias
    return xw


@jit_inline_ir
def _x_row(layout, time, b, seq, batch):
    """Row of X (and of the projection) holding step `time` of batch row `b`."""
    return b * seq + time if layout == 1 else time * batch + b


@jit_inline_ir
def _y_at(layout, time, b, d, seq, dirs, batch, hidden):
    """Offset of Y[time, d, b, :] (layout 0) / Y[b, time, d, :] (layout 1)."""
    if layout == 1:
        return ((b * seq + time) * dirs + d) * hidden
    return ((time * dirs + d) * batch + b) * hidden


@jit_inline_ir
def _state_at(layout, b, d, dirs, batch, hidden):
    """Offset of a state's [d, b, :] (layout 0) / [b, d, :] (layout 1)."""
    if layout == 1:
        return (b * dirs + d) * hidden
    return (d * batch + b) * hidden


@jit_inline_ir
def _activation(attrs, fattrs, slot):
    """(code, alpha, beta) of activation slot `slot`."""
    return attrs[ACTIVATIONS + slot], fattrs[ALPHAS + slot], fattrs[BETAS + slot]


@jit_inline_ir
def _is_reverse(attrs, d):
    return attrs[DIRECTION] == 1 or (attrs[DIRECTION] == 2 and d == 1)


@jit_with_nrt
def _positions(t, lengths, reverse, layout, d, dims, rows, outs):
    """Step t of each batch row: rows[b] its row of X (-1: the row has ended), outs[b] the
    offset of its Y entry."""
    seq, batch, width, hidden, dirs = dims
    for b in range(batch):
        rows[b] = -1
        if t < lengths[b]:
            time = lengths[b] - 1 - t if reverse else t
            rows[b] = _x_row(layout, time, b, seq, batch)
            outs[b] = _y_at(layout, time, b, d, seq, dirs, batch, hidden)


# -- shape inference ----------------------------------------------------------------------------


@jit_with_nrt
def _state_ok(table, row, layout, dirs, batch, hidden):
    """Is state input `row` [dirs, batch, H] (layout 0) / [batch, dirs, H] (layout 1)?"""
    if rank(table, row) != 3 or dim(table, row, 2) != hidden:
        return False
    if layout == 1:
        return dim(table, row, 0) == batch and dim(table, row, 1) == dirs
    return dim(table, row, 0) == dirs and dim(table, row, 1) == batch


@jit_with_nrt
def recurrent_infer(table, n_in, n_out, attrs, gates, states):
    """Shapes of LSTM / GRU / RNN (`gates` per direction; `states` 2 for LSTM's h and c)."""
    if attrs.shape[0] < SLOTS:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    direction, layout, flag = attrs[DIRECTION], attrs[LAYOUT], attrs[FLAG]
    if direction < 0 or direction > 2 or (layout != 0 and layout != 1) or flag < 0 or flag > 1:
        return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    dirs = 2 if direction == 2 else 1
    per_direction = 3 if gates == 4 else (2 if gates == 3 else 1)
    for k in range(dirs * per_direction):
        if attrs[ACTIVATIONS + k] < SIGMOID or attrs[ACTIVATIONS + k] > AFFINE:
            return np.int32(STATUS_OP_BAD_ATTRIBUTE)
    kind = dtype(table, 0)
    if kind != F32 and kind != F64:
        return np.int32(STATUS_OP_BAD_DTYPE)
    for row in range(1, n_in):
        if row != 4 and present(table, row) and dtype(table, row) != kind:
            return np.int32(STATUS_OP_BAD_DTYPE)
    if rank(table, 0) != 3 or rank(table, 1) != 3 or rank(table, 2) != 3:
        return np.int32(STATUS_OP_BAD_SHAPE)
    for row in range(n_in):
        if present(table, row) and element_count(table, row) < 0:
            return np.int32(STATUS_OP_TOO_LARGE)
    seq = dim(table, 0, 1) if layout == 1 else dim(table, 0, 0)
    batch = dim(table, 0, 0) if layout == 1 else dim(table, 0, 1)
    width = dim(table, 0, 2)
    hidden = dim(table, 2, 2)
    gh = gates * hidden
    if attrs[HIDDEN] >= 0 and attrs[HIDDEN] != hidden:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, 1, 0) != dirs or dim(table, 1, 1) != gh or dim(table, 1, 2) != width:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if dim(table, 2, 0) != dirs or dim(table, 2, 1) != gh:
        return np.int32(STATUS_OP_BAD_SHAPE)
    if n_in > 3 and present(table, 3):
        if rank(table, 3) != 2 or dim(table, 3, 0) != dirs or dim(table, 3, 1) != 2 * gh:
            return np.int32(STATUS_OP_BAD_SHAPE)
    if n_in > 4 and present(table, 4):
        if dtype(table, 4) != I32:
            return np.int32(STATUS_OP_BAD_DTYPE)
        if rank(table, 4) != 1 or dim(table, 4, 0) != batch:
            return np.int32(STATUS_OP_BAD_SHAPE)
    for row in range(5, min(n_in, 5 + states)):
        if present(table, row) and not _state_ok(table, row, layout, dirs, batch, hidden):
            return np.int32(STATUS_OP_BAD_SHAPE)
    if n_in > 7 and present(table, 7):  # LSTM's peepholes
        if rank(table, 7) != 2 or dim(table, 7, 0) != dirs or dim(table, 7, 1) != 3 * hidden:
            return np.int32(STATUS_OP_BAD_SHAPE)
    set_output(table, n_in, kind, 4)  # Y: [seq, dirs, batch, H] / [batch, seq, dirs, H]
    set_dim(table, n_in, 0, batch if layout == 1 else seq)
    set_dim(table, n_in, 1, seq if layout == 1 else dirs)
    set_dim(table, n_in, 2, dirs if layout == 1 else batch)
    set_dim(table, n_in, 3, hidden)
    if element_count(table, n_in) < 0:
        return np.int32(STATUS_OP_TOO_LARGE)
    for row in range(n_in + 1, n_in + n_out):  # Y_h (, Y_c)
        set_output(table, row, kind, 3)
        set_dim(table, row, 0, batch if layout == 1 else dirs)
        set_dim(table, row, 1, dirs if layout == 1 else batch)
        set_dim(table, row, 2, hidden)
    table[RESULT_ROW, 0] = 2 * dirs * seq * batch * gh * (width + hidden)
    return OK


@jit_with_nrt
def lstm_infer(arena, table, n_in, n_out, attrs, fattrs):
    return recurrent_infer(table, n_in, n_out, attrs, 4, 2)


@jit_with_nrt
def gru_infer(arena, table, n_in, n_out, attrs, fattrs):
    return recurrent_infer(table, n_in, n_out, attrs, 3, 1)


@jit_with_nrt
def rnn_infer(arena, table, n_in, n_out, attrs, fattrs):
    return recurrent_infer(table, n_in, n_out, attrs, 1, 1)


# -- compute ---------------------------------------------------------------------------------


@jit_with_nrt
def _lengths(arena, table, n_in, seq, batch):
    """(status, the sequence length of each batch row): sequence_lens, or seq for all."""
    lengths = np.full(batch, seq, dtype=np.int64)
    if n_in > 4 and present(table, 4):
        given = view(arena, table, 4, np.int32)
        for b in range(batch):
            if given[b] < 0 or given[b] > seq:
                return np.int32(STATUS_OP_BAD_INDEX), lengths
            lengths[b] = given[b]
    return OK, lengths


@jit_with_nrt
def _initial_state(source, given, d, layout, dirs, batch, hidden):
    """Direction d's initial state, [batch, H]: from state input `source` if `given`, else
    zeros."""
    state = np.zeros(batch * hidden, dtype=source.dtype)
    if given:
        for b in range(batch):
            at = _state_at(layout, b, d, dirs, batch, hidden)
            for j in range(hidden):
                state[b * hidden + j] = source[at + j]
    return state


@jit_with_nrt
def _store_state(state, out, lengths, d, layout, dirs, batch, hidden):
    """Direction d's final state into output `out`; zeros for a row of length 0 (as
    onnxruntime has it), whatever its initial state."""
    for b in range(batch):
        at = _state_at(layout, b, d, dirs, batch, hidden)
        for j in range(hidden):
            out[at + j] = state[b * hidden + j] if lengths[b] > 0 else 0.0


@jit_inline_ir
def _setup(arena, table, n_in, n_out, attrs, gates, states, kind):
    """(status, seq, batch, width, hidden, dirs, lengths, the X / W / R / B views)."""
    status = recurrent_infer(table, n_in, n_out, attrs, gates, states)
    for row in range(n_in + n_out):
        if status == 0 and row < n_in and present(table, row) and not holds(table, row):
            status = np.int32(STATUS_OP_BAD_SHAPE)
        if status == 0 and row >= n_in and not holds(table, row):
            status = np.int32(STATUS_OP_BAD_SHAPE)
    layout = attrs[LAYOUT]
    seq = dim(table, 0, 1) if layout == 1 else dim(table, 0, 0)
    batch = dim(table, 0, 0) if layout == 1 else dim(table, 0, 1)
    lengths = np.zeros(0, dtype=np.int64)
    if status == 0:
        status, lengths = _lengths(arena, table, n_in, seq, batch)
    has_b = n_in > 3 and present(table, 3)
    b = view(arena, table, 3 if has_b else 0, kind)
    return (
        status,
        seq,
        batch,
        dim(table, 0, 2),
        dim(table, 2, 2),
        2 if attrs[DIRECTION] == 2 else 1,
        lengths,
        view(arena, table, 0, kind),
        view(arena, table, 1, kind),
        view(arena, table, 2, kind),
        b,
        has_b,
    )


@jit_with_nrt
def _buffers(x, w, r, b, has_b, d, dims, gh):
    """What an LSTM or RNN direction (gh gate columns) works in: the input projection with
    both biases, R[d]^T, the recurrent product [batch, gh] and each step's rows and outs."""
    seq, batch, width, hidden, dirs = dims
    xw = _projection(x, w, b, has_b, d, seq * batch, width, gh, gh)
    r_t = _transposed(r, d * gh * hidden, gh, hidden)
    hr = np.empty(batch * gh, dtype=x.dtype)
    return xw, r_t, hr, np.empty(batch, dtype=np.int64), np.empty(batch, dtype=np.int64)


@jit_with_nrt
def _lstm_direction(x, w, r, b, has_b, p, has_p, h, c, lengths, y, d, dims, attrs, fattrs):
    """Run LSTM direction `d` over every step; h and c ([batch, H]) end as its final states.
    dims: (seq, batch, width, hidden, dirs)."""
    seq, batch, width, hidden, dirs = dims
    gh = 4 * hidden
    reverse, clip = _is_reverse(attrs, d), fattrs[CLIP]
    forget_is_input = attrs[FLAG] == 1
    f_code, f_alpha, f_beta = _activation(attrs, fattrs, d * 3)
    g_code, g_alpha, g_beta = _activation(attrs, fattrs, d * 3 + 1)
    h_code, h_alpha, h_beta = _activation(attrs, fattrs, d * 3 + 2)
    xw, r_t, hr, rows, outs = _buffers(x, w, r, b, has_b, d, dims, gh)
    for t in range(0 if batch == 0 else lengths.max()):
        _product(h, r_t, hr, batch, hidden, gh)
        _positions(t, lengths, reverse, attrs[LAYOUT], d, dims, rows, outs)
        for bi in range(batch):
            if rows[bi] < 0:
                continue
            row, out = rows[bi] * gh, outs[bi]
            for j in range(hidden):
                pre_i = np.float64(xw[row + j]) + hr[bi * gh + j]
                pre_o = np.float64(xw[row + hidden + j]) + hr[bi * gh + hidden + j]
                pre_f = np.float64(xw[row + 2 * hidden + j]) + hr[bi * gh + 2 * hidden + j]
                pre_c = np.float64(xw[row + 3 * hidden + j]) + hr[bi * gh + 3 * hidden + j]
                previous = np.float64(c[bi * hidden + j])
                if has_p:
                    pre_i += p[d * 3 * hidden + j] * previous
                    pre_f += p[d * 3 * hidden + 2 * hidden + j] * previous
                gate_i = activate(f_code, f_alpha, f_beta, clip, pre_i)
                if forget_is_input:
                    gate_f = 1.0 - gate_i
                else:
                    gate_f = activate(f_code, f_alpha, f_beta, clip, pre_f)
                cell = gate_f * previous + gate_i * activate(g_code, g_alpha, g_beta, clip, pre_c)
                if has_p:
                    pre_o += p[d * 3 * hidden + hidden + j] * cell
                gate_o = activate(f_code, f_alpha, f_beta, clip, pre_o)
                state = gate_o * activate(h_code, h_alpha, h_beta, 0.0, cell)
                c[bi * hidden + j] = cell
                h[bi * hidden + j] = state
                if y.shape[0] > 0:
                    y[out + j] = state


@jit_with_nrt
def _gru_direction(x, w, r, b, has_b, h, lengths, y, d, dims, attrs, fattrs):
    """Run GRU direction `d` over every step; h ([batch, H]) ends as its final state."""
    seq, batch, width, hidden, dirs = dims
    gh = 3 * hidden
    reverse, clip = _is_reverse(attrs, d), fattrs[CLIP]
    linear_before_reset = attrs[FLAG] == 1
    f_code, f_alpha, f_beta = _activation(attrs, fattrs, d * 2)
    g_code, g_alpha, g_beta = _activation(attrs, fattrs, d * 2 + 1)
    # Rbh is added inside the reset product with linear_before_reset, else with the input
    rb_columns = 2 * hidden if linear_before_reset else gh
    xw = _projection(x, w, b, has_b, d, seq * batch, width, gh, rb_columns)
    zr_t = _transposed(r, d * gh * hidden, 2 * hidden, hidden)
    h_t = _transposed(r, (d * gh + 2 * hidden) * hidden, hidden, hidden)
    r_bias = np.zeros(hidden, dtype=np.float64)
    if has_b and linear_before_reset:
        for j in range(hidden):
            r_bias[j] = b[d * 2 * gh + gh + 2 * hidden + j]
    hzr = np.empty(batch * 2 * hidden, dtype=x.dtype)
    update = np.empty(batch * hidden, dtype=np.float64)
    reset = np.zeros(batch * hidden, dtype=x.dtype)  # r, or r * h without linear_before_reset
    hh = np.empty(batch * hidden, dtype=x.dtype)
    rows, outs = np.empty(batch, dtype=np.int64), np.empty(batch, dtype=np.int64)
    for t in range(0 if batch == 0 else lengths.max()):
        _product(h, zr_t, hzr, batch, hidden, 2 * hidden)
        _positions(t, lengths, reverse, attrs[LAYOUT], d, dims, rows, outs)
        for bi in range(batch):
            if rows[bi] < 0:
                continue
            row = rows[bi] * gh
            for j in range(hidden):
                pre_z = np.float64(xw[row + j]) + hzr[bi * 2 * hidden + j]
                pre_r = np.float64(xw[row + hidden + j]) + hzr[bi * 2 * hidden + hidden + j]
                update[bi * hidden + j] = activate(f_code, f_alpha, f_beta, clip, pre_z)
                gate_r = activate(f_code, f_alpha, f_beta, clip, pre_r)
                if linear_before_reset:
                    reset[bi * hidden + j] = gate_r
                else:
                    reset[bi * hidden + j] = gate_r * h[bi * hidden + j]
        _product(h if linear_before_reset else reset, h_t, hh, batch, hidden, hidden)
        for bi in range(batch):
            if rows[bi] < 0:
                continue
            row, out = rows[bi] * gh, outs[bi]
            for j in range(hidden):
                k = bi * hidden + j
                recurrent = np.float64(hh[k])
                if linear_before_reset:
                    recurrent = reset[k] * (recurrent + r_bias[j])
                pre_h = np.float64(xw[row + 2 * hidden + j]) + recurrent
                candidate = activate(g_code, g_alpha, g_beta, clip, pre_h)
                state = (1.0 - update[k]) * candidate + update[k] * h[k]
                h[k] = state
                if y.shape[0] > 0:
                    y[out + j] = state


@jit_with_nrt
def _rnn_direction(x, w, r, b, has_b, h, lengths, y, d, dims, attrs, fattrs):
    """Run RNN direction `d` over every step; h ([batch, H]) ends as its final state."""
    seq, batch, width, hidden, dirs = dims
    reverse, clip = _is_reverse(attrs, d), fattrs[CLIP]
    code, alpha, beta = _activation(attrs, fattrs, d)
    xw, r_t, hr, rows, outs = _buffers(x, w, r, b, has_b, d, dims, hidden)
    for t in range(0 if batch == 0 else lengths.max()):
        _product(h, r_t, hr, batch, hidden, hidden)
        _positions(t, lengths, reverse, attrs[LAYOUT], d, dims, rows, outs)
        for bi in range(batch):
            if rows[bi] < 0:
                continue
            row, out = rows[bi] * hidden, outs[bi]
            for j in range(hidden):
                pre = np.float64(xw[row + j]) + hr[bi * hidden + j]
                state = activate(code, alpha, beta, clip, pre)
                h[bi * hidden + j] = state
                if y.shape[0] > 0:
                    y[out + j] = state


@jit_inline_ir
def _run_cell(arena, table, n_in, n_out, attrs, fattrs, gates, kind):
    """Every direction of LSTM (gates 4), GRU (3) or RNN (1) on `kind` data."""
    states = 2 if gates == 4 else 1
    status, seq, batch, width, hidden, dirs, lengths, x, w, r, b, has_b = _setup(
        arena, table, n_in, n_out, attrs, gates, states, kind
    )
    if status != 0:
        return status
    layout = attrs[LAYOUT]
    dims = (seq, batch, width, hidden, dirs)
    y = view(arena, table, n_in, kind)
    y[:] = 0  # steps past a row's length
    has_p = n_in > 7 and present(table, 7)
    p = view(arena, table, 7 if has_p else 0, kind)
    has_h = n_in > 5 and present(table, 5)
    initial_h = view(arena, table, 5 if has_h else 0, kind)
    has_c = n_in > 6 and present(table, 6)
    initial_c = view(arena, table, 6 if has_c else 0, kind)
    for d in range(dirs):
        h = _initial_state(initial_h, has_h, d, layout, dirs, batch, hidden)
        if gates == 4:
            c = _initial_state(initial_c, has_c, d, layout, dirs, batch, hidden)
            _lstm_direction(x, w, r, b, has_b, p, has_p, h, c, lengths, y, d, dims, attrs, fattrs)
            if n_out > 2:
                final_c = view(arena, table, n_in + 2, kind)
                _store_state(c, final_c, lengths, d, layout, dirs, batch, hidden)
        elif gates == 3:
            _gru_direction(x, w, r, b, has_b, h, lengths, y, d, dims, attrs, fattrs)
        else:
            _rnn_direction(x, w, r, b, has_b, h, lengths, y, d, dims, attrs, fattrs)
        if n_out > 1:
            final_h = view(arena, table, n_in + 1, kind)
            _store_state(h, final_h, lengths, d, layout, dirs, batch, hidden)
    return OK


@jit_with_nrt.keeping_literals("gates", "kind")
def recurrent_compute(arena, table, n_in, n_out, attrs, fattrs, gates, kind):
    """The compute of LSTM (gates 4), GRU (3) and RNN (1): an op family, one entry each."""
    if kind == F32:
        return _run_cell(arena, table, n_in, n_out, attrs, fattrs, gates, np.float32)
    if kind == F64:
        return _run_cell(arena, table, n_in, n_out, attrs, fattrs, gates, np.float64)
    return np.int32(STATUS_OP_BAD_DTYPE)


# X, W, R, B, initial_h (, initial_c, P): one float type; sequence_lens int32
_LENGTHS = frozenset({DType.INT32})
for _name, _infer, _gates, _inputs, _outputs in (
    ("LSTM", lstm_infer, 4, 8, 3),
    ("GRU", gru_infer, 3, 6, 2),
    ("RNN", rnn_infer, 1, 6, 2),
):
    register_op(
        _name,
        _infer,
        recurrent_compute,
        constants=(_gates,),
        encode=encode_recurrent(_name),
        inputs=(3, _inputs),
        outputs=(1, _outputs),
        dtypes={k: _LENGTHS if k == 4 else FLOATS for k in range(_inputs)},
        variants=True,
    )
