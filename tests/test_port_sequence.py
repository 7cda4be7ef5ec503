"""Sequence models and training utilities, written as PyTorch's tutorials and examples
write them, run twice: on PyTorch and on microtensor, the same code with only the library
differing.

Each program is a function of the library, ``program(torch, init, **options)``: it builds
its model, loads ``init`` (the PyTorch run's initial state_dict, through NumPy) when given,
feeds inputs made from fixed NumPy values, trains a few steps and returns what a user
looks at: forward outputs, losses, every parameter's ``.grad``, the parameters after the
optimizer steps, eval-mode outputs, state_dicts.  ``_compare`` runs it on both libraries and
asserts that the results agree to float32 tolerances.

Two things a program does not compare, because they differ by design: random streams
(microtensor's generator is not PyTorch's, so dropout is set to 0 while training and
sampling is compared by its statistics) and, with Adam-like optimizers, parameters whose
gradient is zero up to round-off (the key bias of an attention, a bias before a
BatchNorm): the optimizer's normalisation blows that round-off up to the learning rate,
so those programs step with SGD.
"""
import math
import warnings

import numpy as np
import pytest

import microtensor
from test_port_vision import _pytorch_on_one_thread  # noqa: F401 (an autouse fixture)

try:
    import torch as _torch
except ImportError:     # pragma: no cover
    _torch = None

needs_torch = pytest.mark.skipif(_torch is None, reason="PyTorch is not installed: the "
                                 "programs are compared against it")


# PyTorch's own deprecation notes (a float causal mask beside a bool padding mask, as its
# tutorials write them) and the transformers' note on their nested-tensor path (checked in
# test_transformer_encoder_inference_zeros_padded_outputs_as_pytorch) are not what these
# tests look at
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:torch"),
              pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")]


# --------------------------------------------------------------------------- harness

def _numpy(value):
    """A result as NumPy (reduced-precision floats widened to float32), recursively."""
    if hasattr(value, "detach"):
        value = value.detach()
        if value.is_floating_point() and value.element_size() < 4:
            value = value.float()
        return value.numpy().copy()
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_numpy(v) for v in value]
    if isinstance(value, str):
        return value
    return np.asarray(value)


def _state(model):
    return {k: _numpy(v) for k, v in model.state_dict().items()}


def _load(torch, model, init):
    if init is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})


def _grads(model):
    return {n: p.grad for n, p in model.named_parameters()}


def _assert_same(got, ref, name, rtol, atol):
    if isinstance(ref, dict):
        assert list(got) == list(ref), name
        for key in ref:
            _assert_same(got[key], ref[key], f"{name}.{key}", rtol, atol)
    elif isinstance(ref, list):
        assert len(got) == len(ref), name
        for i, (g, r) in enumerate(zip(got, ref)):
            _assert_same(g, r, f"{name}[{i}]", rtol, atol)
    elif isinstance(ref, str) or ref.dtype.kind in "USOb":
        assert np.array_equal(got, ref), (name, got, ref)
    else:
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=name)


def _compare(program, rtol=1e-4, atol=1e-5, **options):
    """Runs ``program`` on PyTorch, then on microtensor from PyTorch's initial weights."""
    ref = _numpy(program(_torch, None, **options))
    init = ref.pop("init")
    got = _numpy(program(microtensor, init, **options))
    got.pop("init")
    _assert_same(got, ref, program.__name__, rtol, atol)
    return got


def _no_dropout(torch, model):
    """Dropout off in training, so that both libraries take the same steps."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        elif isinstance(m, (torch.nn.MultiheadAttention, torch.nn.RNNBase)):
            m.dropout = 0.0


# --------------------------------------------------------------------------- programs

def text_classifier(torch, init, cell="LSTM", enforce_sorted=True, bidirectional=True):
    """An RNN over padded token ids: Embedding(padding_idx), packed sequences, two layers
    with dropout between them, the last layer's final hidden states into a Linear."""
    nn = torch.nn
    rnn_utils = torch.nn.utils.rnn
    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self, vocab=20, emb=6, hidden=5, classes=3):
            super().__init__()
            self.embedding = nn.Embedding(vocab, emb, padding_idx=0)
            self.rnn = getattr(nn, cell)(emb, hidden, num_layers=2, dropout=0.3,
                                         bidirectional=bidirectional, batch_first=True)
            self.fc = nn.Linear(hidden * (2 if bidirectional else 1), classes)

        def forward(self, text, lengths):
            packed = rnn_utils.pack_padded_sequence(self.embedding(text), lengths,
                                                    batch_first=True,
                                                    enforce_sorted=enforce_sorted)
            out, hidden = self.rnn(packed)
            if cell == "LSTM":
                hidden = hidden[0]
            padded, out_lengths = rnn_utils.pad_packed_sequence(out, batch_first=True)
            if bidirectional:
                hidden = torch.cat((hidden[-2, :, :], hidden[-1, :, :]), dim=1)
            else:
                hidden = hidden[-1]
            return self.fc(hidden), padded, out_lengths

    model = Classifier()
    _load(torch, model, init)
    res = {"init": _state(model)}
    lengths = [7, 5, 5, 3, 1] if enforce_sorted else [3, 7, 1, 5, 4]
    tokens = np.zeros((5, 7), dtype=np.int64)
    for i, n in enumerate(lengths):
        tokens[i, :n] = (np.arange(n) * 7 + 3 * i) % 19 + 1
    text, lengths = torch.tensor(tokens), torch.tensor(lengths)
    labels = torch.tensor([0, 1, 2, 1, 0])
    model.eval()
    res["eval"], res["padded"], res["lengths"] = model(text, lengths)
    model.train()
    _no_dropout(torch, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    for step in range(3):
        optimizer.zero_grad()
        logits, _, _ = model(text, lengths)
        loss = criterion(logits, labels)
        loss.backward()
        if step == 0:
            res["grads"] = _grads(model)
        optimizer.step()
        res[f"loss{step}"] = loss
    res["state"] = _state(model)
    res["padding_row"] = model.embedding.weight[0]
    return res


def char_rnn(torch, init, cell="LSTM"):
    """The word_language_model example: truncated backpropagation through time (the hidden
    state detached between chunks), clip_grad_norm_, then greedy generation with a
    temperature in eval mode."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)
    vocab, nhid = 11, 8

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)
            self.encoder = nn.Embedding(vocab, nhid)
            self.rnn = getattr(nn, cell)(nhid, nhid, 2, dropout=0.2)
            self.decoder = nn.Linear(nhid, vocab)

        def forward(self, x, h):
            out, h = self.rnn(self.drop(self.encoder(x)), h)
            return self.decoder(self.drop(out)).view(-1, vocab), h

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if cell == "LSTM":
                return (weight.new_zeros(2, bsz, nhid), weight.new_zeros(2, bsz, nhid))
            return weight.new_zeros(2, bsz, nhid)

    def repackage_hidden(h):
        if isinstance(h, torch.Tensor):
            return h.detach()
        return tuple(repackage_hidden(v) for v in h)

    model = RNNModel()
    _load(torch, model, init)
    res = {"init": _state(model)}
    data = torch.tensor((np.arange(3 * 19).reshape(19, 3) * 5 % 11).astype(np.int64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, nesterov=True)
    _no_dropout(torch, model)
    model.train()
    hidden, bptt = model.init_hidden(3), 6
    norms, losses = [], []
    for i in range(0, data.size(0) - 1, bptt):
        seq_len = min(bptt, len(data) - 1 - i)
        x, targets = data[i:i + seq_len], data[i + 1:i + 1 + seq_len].reshape(-1)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(x, hidden)
        loss = F.nll_loss(F.log_softmax(output, dim=-1), targets)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)))
        losses.append(loss.item())
        optimizer.step()
    res["norms"], res["losses"], res["state"] = norms, losses, _state(model)
    res["hidden"] = hidden[0] if cell == "LSTM" else hidden
    model.eval()
    with torch.no_grad():
        token, hidden, words, probs = torch.tensor([[3]]), model.init_hidden(1), [], []
        for _ in range(5):
            output, hidden = model(token, hidden)
            weights = output.squeeze().div(0.8).exp()
            probs.append(weights / weights.sum())
            index = torch.argmax(weights)
            token.fill_(index)
            words.append(int(index))
    res["words"], res["probs"] = words, torch.stack(probs)
    return res


def seq2seq(torch, init, attention="bahdanau"):
    """An attention seq2seq (the NLP-from-scratch tutorial's kind): a bidirectional GRU
    encoder, additive (Bahdanau) or multiplicative (Luong) attention over the source with
    padding masked by masked_fill(-inf), a GRUCell decoder with teacher forcing, label
    smoothing with ignore_index, clip_grad_value_."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)
    vocab, hidden = 12, 8

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, hidden, padding_idx=0)
            self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(2 * hidden, hidden)

        def forward(self, src):
            out, h = self.gru(self.embedding(src))
            return out, torch.tanh(self.fc(torch.cat((h[-2], h[-1]), dim=1)))

    class Bahdanau(nn.Module):
        def __init__(self):
            super().__init__()
            self.Wa = nn.Linear(hidden, hidden)
            self.Ua = nn.Linear(2 * hidden, hidden)
            self.Va = nn.Linear(hidden, 1)

        def forward(self, query, keys, mask):
            scores = self.Va(torch.tanh(self.Wa(query.unsqueeze(1)) + self.Ua(keys))).squeeze(2)
            weights = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            return torch.bmm(weights.unsqueeze(1), keys).squeeze(1), weights

    class Luong(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Linear(2 * hidden, hidden, bias=False)

        def forward(self, query, keys, mask):
            scores = torch.bmm(self.W(keys), query.unsqueeze(2)).squeeze(2)
            weights = scores.masked_fill(mask == 0, -float("inf")).softmax(-1)
            return torch.einsum("bs,bsh->bh", weights, keys), weights

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, hidden)
            self.attention = Bahdanau() if attention == "bahdanau" else Luong()
            self.gru = nn.GRUCell(3 * hidden, hidden)
            self.out = nn.Linear(4 * hidden, vocab)
            self.dropout = nn.Dropout(0.1)

        def forward(self, token, h, encoded, mask):
            embedded = self.dropout(self.embedding(token))
            context, weights = self.attention(h, encoded, mask)
            h = self.gru(torch.cat([embedded, context], dim=1), h)
            return self.out(torch.cat([h, context, embedded], dim=1)), h, weights

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = Encoder(), Decoder()

        def forward(self, src, trg, teacher_forcing):
            encoded, h = self.encoder(src)
            mask, token, outputs, attentions = src != 0, trg[:, 0], [], []
            for t in range(1, trg.shape[1]):
                out, h, weights = self.decoder(token, h, encoded, mask)
                outputs.append(out)
                attentions.append(weights)
                token = trg[:, t] if teacher_forcing[t] else out.argmax(1)
            return torch.stack(outputs, 1), torch.stack(attentions, 1)

    model = Seq2Seq()
    _load(torch, model, init)
    res = {"init": _state(model)}
    src = torch.tensor([[1, 5, 6, 7, 2], [1, 3, 4, 2, 0], [1, 9, 2, 0, 0]])
    trg = torch.tensor([[1, 4, 5, 2], [1, 8, 2, 0], [1, 3, 3, 2]])
    model.eval()
    with torch.no_grad():
        res["eval"], res["eval_attention"] = model(src, trg, [False] * 4)
    model.train()
    _no_dropout(torch, model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    criterion = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
    for step in range(3):
        optimizer.zero_grad()
        out, _ = model(src, trg, [True, True, False, True])
        loss = criterion(out.reshape(-1, vocab), trg[:, 1:].reshape(-1))
        loss.backward()
        if step == 0:
            res["out"], res["grads"] = out, _grads(model)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
    res["loss"], res["state"] = loss, _state(model)
    return res


def transformer_lm(torch, init, norm_first=False, batch_first=True, activation="relu",
                   is_causal=True):
    """The transformer tutorial's language model: positional encoding buffer,
    TransformerEncoder over a causal mask and a key padding mask, AdamW."""
    nn = torch.nn
    torch.manual_seed(0)
    vocab, d_model, seq, batch = 13, 8, 6, 3

    class PositionalEncoding(nn.Module):
        def __init__(self):
            super().__init__()
            self.dropout = nn.Dropout(0.1)
            position = torch.arange(seq).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(seq, 1, d_model)
            pe[:, 0, 0::2] = torch.sin(position * div_term)
            pe[:, 0, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe)

        def forward(self, x):
            if batch_first:
                return self.dropout(x + self.pe[:x.size(1)].transpose(0, 1))
            return self.dropout(x + self.pe[:x.size(0)])

    class TransformerModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos_encoder = PositionalEncoding()
            layer = nn.TransformerEncoderLayer(d_model, 2, 16, 0.1, activation=activation,
                                               batch_first=batch_first, norm_first=norm_first)
            self.encoder = nn.TransformerEncoder(
                layer, 2, norm=nn.LayerNorm(d_model) if norm_first else None,
                enable_nested_tensor=False)
            self.embedding = nn.Embedding(vocab, d_model)
            self.linear = nn.Linear(d_model, vocab)

        def forward(self, src, mask, padding):
            x = self.pos_encoder(self.embedding(src) * math.sqrt(d_model))
            if is_causal:
                x = self.encoder(x, mask=mask, src_key_padding_mask=padding, is_causal=True)
            else:
                x = self.encoder(x, mask, padding)
            return self.linear(x)

    model = TransformerModel()
    _load(torch, model, init)
    res = {"init": _state(model)}
    tokens = (np.arange(batch * seq).reshape(batch, seq) * 7 % (vocab - 1) + 1)
    tokens[1, 4:] = tokens[2, 5:] = 0
    padding = torch.tensor(tokens == 0)
    src = torch.tensor(tokens)
    if not batch_first:
        src = src.t()
    mask = nn.Transformer.generate_square_subsequent_mask(seq)
    res["mask"] = mask
    model.eval()
    with torch.no_grad():
        res["eval"] = model(src, mask, padding)
    model.train()
    _no_dropout(torch, model)
    # SGD: the attention's key bias has a zero gradient up to round-off (see the docstring)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss(ignore_index=0)
    targets = torch.roll(src, -1, dims=1 if batch_first else 0)
    for step in range(3):
        optimizer.zero_grad()
        out = model(src, mask, padding)
        loss = criterion(out.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        if step == 0:
            res["out"], res["grads"] = out, _grads(model)
        optimizer.step()
    res["loss"], res["state"] = loss, _state(model)
    return res


def translation_transformer(torch, init, batch_first=True, norm_first=False):
    """nn.Transformer for translation: source and target padding masks, the target's
    causal mask, training with label smoothing, then greedy decoding through the
    encoder and decoder in eval mode."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)
    d_model, vocab = 8, 10

    class Seq2SeqTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_tok_emb = nn.Embedding(vocab, d_model, padding_idx=0)
            self.tgt_tok_emb = nn.Embedding(vocab, d_model, padding_idx=0)
            self.transformer = nn.Transformer(d_model=d_model, nhead=2, num_encoder_layers=2,
                                              num_decoder_layers=1, dim_feedforward=12,
                                              dropout=0.1, batch_first=batch_first,
                                              norm_first=norm_first)
            self.generator = nn.Linear(d_model, vocab)

        def forward(self, src, tgt, src_padding, tgt_padding):
            length = tgt.size(1) if batch_first else tgt.size(0)
            tgt_mask = self.transformer.generate_square_subsequent_mask(length)
            out = self.transformer(self.src_tok_emb(src), self.tgt_tok_emb(tgt),
                                   tgt_mask=tgt_mask, src_key_padding_mask=src_padding,
                                   tgt_key_padding_mask=tgt_padding,
                                   memory_key_padding_mask=src_padding, tgt_is_causal=True)
            return self.generator(out)

    model = Seq2SeqTransformer()
    _load(torch, model, init)
    res = {"init": _state(model)}
    src = torch.tensor([[1, 4, 5, 6, 2], [1, 7, 2, 0, 0]])
    tgt = torch.tensor([[1, 3, 8, 2], [1, 9, 2, 0]])
    src_padding, tgt_padding = src == 0, tgt == 0
    if not batch_first:
        src, tgt = src.t(), tgt.t()
    model.eval()
    with torch.no_grad():
        res["eval"] = model(src, tgt, src_padding, tgt_padding)
        memory = model.transformer.encoder(model.src_tok_emb(src),
                                           src_key_padding_mask=src_padding)
        ys = torch.ones(2, 1, dtype=torch.long)
        for _ in range(4):
            y = ys if batch_first else ys.t()
            mask = nn.Transformer.generate_square_subsequent_mask(ys.size(1))
            out = model.transformer.decoder(model.tgt_tok_emb(y), memory, tgt_mask=mask,
                                            memory_key_padding_mask=src_padding)
            last = out[:, -1] if batch_first else out[-1]
            ys = torch.cat([ys, model.generator(last).argmax(-1, keepdim=True)], dim=1)
        res["greedy"] = ys
    model.train()
    _no_dropout(torch, model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    targets = torch.roll(tgt, -1, 1 if batch_first else 0).reshape(-1)
    for step in range(3):
        optimizer.zero_grad()
        out = model(src, tgt, src_padding, tgt_padding)
        loss = F.cross_entropy(out.reshape(-1, vocab), targets, ignore_index=0,
                               label_smoothing=0.1)
        loss.backward()
        if step == 0:
            res["grads"] = _grads(model)
        optimizer.step()
    res["loss"], res["state"] = loss, _state(model)
    return res


def attention_functions(torch, init):
    """F.scaled_dot_product_attention: is_causal (square and not), bool and float masks,
    scale, grouped-query attention; its gradients; a query with every key masked."""
    F = torch.nn.functional
    values = np.sin(np.arange(1, 1 + 4 * 80)).astype(np.float32)

    def leaf(*shape, start=0):
        size = int(np.prod(shape))
        return torch.tensor(values[start:start + size].reshape(shape), requires_grad=True)

    q, k, v = leaf(2, 2, 5, 4), leaf(2, 2, 5, 4, start=40), leaf(2, 2, 5, 4, start=80)
    k2, v2 = leaf(2, 2, 7, 4, start=120), leaf(2, 2, 7, 3, start=176)
    bool_mask = torch.tensor(values[:35].reshape(5, 7) > -0.4)
    bool_mask[:, 0] = True
    float_mask = torch.tensor(values[200:270].reshape(2, 1, 5, 7))
    outs = {
        "causal": F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "bool": F.scaled_dot_product_attention(q, k2, v2, attn_mask=bool_mask),
        "float": F.scaled_dot_product_attention(q, k2, v2, attn_mask=float_mask, scale=0.3),
        "causal_rectangular": F.scaled_dot_product_attention(q, k2, v2, is_causal=True),
        "gqa": F.scaled_dot_product_attention(q, k2[:, :1], v2[:, :1], enable_gqa=True),
    }
    sum((o * (i + 1)).sum() for i, o in enumerate(outs.values())).backward()
    res = {"init": None, "outs": outs,
           "grads": {"q": q.grad, "k": k.grad, "v": v.grad, "k2": k2.grad, "v2": v2.grad}}
    all_masked = torch.zeros(5, 7, dtype=torch.bool)
    all_masked[:, :3] = True
    all_masked[2] = False
    out = F.scaled_dot_product_attention(q.detach(), k2.detach(), v2.detach(),
                                         attn_mask=all_masked)
    res["all_masked_is_nan"] = torch.isnan(out)
    return res


def gpt(torch, init, accumulation=2):
    """A GPT written by hand (nanoGPT's shape): a causal mask as a non-persistent tril
    buffer, the embedding tied to the LM head, GPT-2 initialisation, AdamW with parameter
    groups (no decay for biases and LayerNorms), warmup then cosine through LambdaLR,
    gradient accumulation, clip_grad_norm_, then top-k generation."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)
    vocab, n_embd, block_size, n_head = 11, 8, 6, 2

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.attn_dropout, self.resid_dropout = nn.Dropout(0.1), nn.Dropout(0.1)
            mask = torch.tril(torch.ones(block_size, block_size))
            self.register_buffer("bias", mask.view(1, 1, block_size, block_size),
                                 persistent=False)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * n_embd, n_embd)
            self.dropout = nn.Dropout(0.1)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention()
            self.ln_2, self.mlp = nn.LayerNorm(n_embd, bias=False), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
                drop=nn.Dropout(0.1), h=nn.ModuleList([Block() for _ in range(2)]),
                ln_f=nn.LayerNorm(n_embd)))
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            self.apply(self._init_weights)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(4))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            if targets is None:
                return self.lm_head(x[:, [-1], :]), None
            logits = self.lm_head(x)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)),
                                           targets.view(-1), ignore_index=-1)

        def configure_optimizers(self, weight_decay, learning_rate, betas):
            params = {n: p for n, p in self.named_parameters() if p.requires_grad}
            groups = [
                {"params": [p for p in params.values() if p.dim() >= 2],
                 "weight_decay": weight_decay},
                {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]
            return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("Inf")
                probs = F.softmax(logits, dim=-1)
                idx = torch.cat((idx, torch.argmax(probs, dim=-1, keepdim=True)), dim=1)
            return idx, probs

    model = GPT()
    _load(torch, model, init)
    assert model.transformer.wte.weight is model.lm_head.weight
    res = {"init": _state(model), "keys": list(model.state_dict()),
           "buffers": [n for n, _ in model.named_buffers()],
           "n_params": sum(p.numel() for p in model.parameters())}
    optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95))
    warmup, total = 2, 5

    def lr_lambda(it):
        if it < warmup:
            return (it + 1) / (warmup + 1)
        return 0.1 + 0.45 * (1.0 + math.cos(math.pi * (it - warmup) / (total - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    data = torch.tensor((np.arange(total * accumulation * 2 * 7) * 5 % vocab)
                        .reshape(total * accumulation, 2, 7))
    _no_dropout(torch, model)
    model.train()
    losses, lrs = [], []
    for it in range(total):
        for micro in range(accumulation):
            batch = data[it * accumulation + micro]
            x, y = batch[:, :-1], batch[:, 1:].clone()
            y[0, -1] = -1
            _, loss = model(x, y)
            (loss / accumulation).backward()
        if it == 0:
            res["grads"] = _grads(model)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        lrs.append(scheduler.get_last_lr())
    res["losses"], res["lrs"], res["state"] = losses, lrs, _state(model)
    res["exp_avg"] = [s["exp_avg"] for s in optimizer.state_dict()["state"].values()]
    model.eval()
    res["generated"], res["probs"] = model.generate(torch.tensor([[1, 2]]), 5,
                                                    temperature=0.8, top_k=3)
    return res


def ctc_speech(torch, init, reduction="mean", zero_infinity=False):
    """A speech recogniser's shape: Conv1d + BatchNorm front end, a bidirectional GRU,
    log_softmax, CTCLoss over concatenated targets (one of them too long for its input:
    an infinite loss), greedy decoding; then F.ctc_loss with padded 2-D targets."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)

    class SpeechModel(nn.Module):
        def __init__(self, classes=6):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv1d(4, 8, 3, stride=2, padding=1),
                                      nn.BatchNorm1d(8), nn.ReLU(),
                                      nn.Conv1d(8, 8, 3, padding=1, groups=2))
            self.gru = nn.GRU(8, 6, bidirectional=True)
            self.fc = nn.Linear(12, classes)

        def forward(self, x):
            x, _ = self.gru(self.conv(x).permute(2, 0, 1))
            return self.fc(x).log_softmax(2)

    model = SpeechModel()
    _load(torch, model, init)
    res = {"init": _state(model)}
    x = torch.tensor(np.cos(np.arange(3 * 4 * 16) * 0.37).reshape(3, 4, 16).astype(np.float32))
    targets = torch.tensor([1, 2, 2, 3, 4, 1] + [5] * 9)
    target_lengths = torch.tensor([5, 1, 9])
    input_lengths = torch.full((3,), 8, dtype=torch.long)
    input_lengths[1] = 6
    criterion = nn.CTCLoss(blank=0, reduction=reduction, zero_infinity=zero_infinity)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        optimizer.zero_grad()
        log_probs = model(x)
        loss = criterion(log_probs, targets, input_lengths, target_lengths)
        (loss.sum() if reduction == "none" else loss).backward()
        if step == 0:
            res["log_probs"], res["loss"], res["grads"] = log_probs, loss, _grads(model)
        optimizer.step()
    res["state"] = _state(model)
    model.eval()
    with torch.no_grad():
        log_probs = model(x)
        res["greedy"] = log_probs.argmax(-1).t()
    padded = torch.tensor([[1, 2, 2, 3, 4, 0, 0, 0, 0], [1] + [0] * 8, [5] * 9])
    res["padded_targets"] = F.ctc_loss(log_probs, padded, input_lengths, target_lengths,
                                       reduction=reduction, zero_infinity=zero_infinity)
    return res


def bag_of_embeddings(torch, init, mode="sum"):
    """The text-classification tutorial's model: EmbeddingBag over a flat batch with
    offsets (one bag empty), per_sample_weights, weighted label-smoothed cross entropy,
    clip_grad_norm_, StepLR; then 2-D input and the functional form."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)

    class TextClassificationModel(nn.Module):
        def __init__(self, vocab=15, embed=5, classes=3):
            super().__init__()
            self.embedding = nn.EmbeddingBag(vocab, embed, mode=mode,
                                             padding_idx=None if mode == "max" else 1)
            self.fc = nn.Linear(embed, classes)
            self.embedding.weight.data.uniform_(-0.5, 0.5)
            self.fc.weight.data.uniform_(-0.5, 0.5)
            self.fc.bias.data.zero_()

        def forward(self, text, offsets, per_sample_weights=None):
            return self.fc(self.embedding(text, offsets, per_sample_weights=per_sample_weights))

    model = TextClassificationModel()
    _load(torch, model, init)
    res = {"init": _state(model)}
    text = torch.tensor([2, 3, 1, 4, 5, 6, 7, 1, 8, 9, 9, 14])
    offsets = torch.tensor([0, 3, 3, 8])
    weights = torch.linspace(0.5, 2.0, 12) if mode == "sum" else None
    optimizer = torch.optim.SGD(model.parameters(), lr=4.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.1)
    labels = torch.tensor([0, 1, 2, 1])
    criterion = nn.CrossEntropyLoss(label_smoothing=0.2, weight=torch.tensor([1., 2., 0.5]))
    for step in range(3):
        optimizer.zero_grad()
        out = model(text, offsets, weights)
        loss = criterion(out, labels)
        loss.backward()
        if step == 0:
            res["out"], res["grads"] = out, _grads(model)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        scheduler.step()
    res["loss"], res["state"] = loss, _state(model)
    res["two_d"] = model.embedding(torch.tensor([[2, 3, 1], [4, 1, 1]]))
    res["functional"] = F.embedding_bag(text, model.embedding.weight,
                                        torch.tensor([0, 3, 3, 8, 12]), mode=mode,
                                        include_last_offset=True)
    return res


def attention_bias_kv(torch, init, packed=True, batched=True, batch_first=False,
                      need_weights=True):
    """MultiheadAttention with add_bias_kv and add_zero_attn (fairseq's options): a learnt
    key and value and a zero one appended to every sequence, which the masks leave
    visible; self-attention (packed projection) or kdim/vdim."""
    nn = torch.nn
    torch.manual_seed(0)
    dims = {} if packed else dict(kdim=3, vdim=3)
    mha = nn.MultiheadAttention(4, 2, add_bias_kv=True, add_zero_attn=True,
                                batch_first=batch_first, **dims)
    _load(torch, mha, init)
    res = {"init": _state(mha), "keys": list(mha.state_dict()),
           "repr": repr(mha).replace("microtensor", "torch")}
    shape = ((2, 3, 4) if batch_first else (3, 2, 4)) if batched else (3, 4)
    query = torch.tensor(np.sin(np.arange(np.prod(shape))).reshape(shape).astype(np.float32),
                         requires_grad=True)
    kv = query
    if not packed:
        kv_shape = shape[:-1] + (3,)
        kv = torch.tensor(np.cos(np.arange(np.prod(kv_shape))).reshape(kv_shape)
                          .astype(np.float32))
    padding = torch.tensor([[False, False, True], [False, True, True]] if batched
                           else [False, True, False])
    causal = nn.Transformer.generate_square_subsequent_mask(3)
    out, weights = mha(query, kv, kv, key_padding_mask=padding, attn_mask=causal,
                       need_weights=need_weights)
    out.pow(2).sum().backward()
    res.update(out=out, grads=_grads(mha), query_grad=query.grad)
    if need_weights:
        res["weights"] = weights
    return res


# --------------------------------------------------------------------------- tests

@needs_torch
@pytest.mark.parametrize("cell, enforce_sorted, bidirectional", [
    ("LSTM", True, True), ("GRU", False, True), ("LSTM", False, False), ("RNN", False, True)])
def test_rnn_text_classifier(cell, enforce_sorted, bidirectional):
    _compare(text_classifier, cell=cell, enforce_sorted=enforce_sorted,
             bidirectional=bidirectional)


@needs_torch
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_char_rnn_truncated_bptt(cell):
    _compare(char_rnn, cell=cell)


@needs_torch
@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
def test_seq2seq_with_attention(attention):
    _compare(seq2seq, attention=attention)


@needs_torch
@pytest.mark.parametrize("norm_first, batch_first, activation, is_causal", [
    (False, True, "relu", True), (True, False, "gelu", False)])
def test_transformer_language_model(norm_first, batch_first, activation, is_causal):
    _compare(transformer_lm, norm_first=norm_first, batch_first=batch_first,
             activation=activation, is_causal=is_causal)


@needs_torch
@pytest.mark.parametrize("batch_first, norm_first", [(True, False), (False, True)])
def test_translation_transformer(batch_first, norm_first):
    _compare(translation_transformer, batch_first=batch_first, norm_first=norm_first)


@needs_torch
def test_scaled_dot_product_attention_masks():
    _compare(attention_functions)


@needs_torch
def test_gpt_weight_tying_param_groups_schedule_accumulation():
    got = _compare(gpt)
    # the tril buffer is not saved, the tied weight is saved under both names
    assert "transformer.h.0.attn.bias" in got["buffers"]
    assert not any(k.endswith("attn.bias") for k in got["keys"])
    assert {"lm_head.weight", "transformer.wte.weight"} <= set(got["keys"])


@needs_torch
@pytest.mark.parametrize("reduction, zero_infinity", [("mean", False), ("none", True)])
def test_ctc_speech_model(reduction, zero_infinity):
    _compare(ctc_speech, reduction=reduction, zero_infinity=zero_infinity)


@needs_torch
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_text_classifier(mode):
    _compare(bag_of_embeddings, mode=mode)


@needs_torch
@pytest.mark.parametrize("packed, batched, batch_first, need_weights", [
    (True, True, False, True), (True, False, False, False), (False, True, True, True),
    (False, True, False, False)])
def test_multihead_attention_add_bias_kv_and_zero_attn(packed, batched, batch_first,
                                                         need_weights):
    _compare(attention_bias_kv, packed=packed, batched=batched, batch_first=batch_first,
             need_weights=need_weights)


def test_multihead_attention_bias_kv_parameters():
    mha = microtensor.nn.MultiheadAttention(4, 2, add_bias_kv=True)
    assert mha.bias_k.shape == mha.bias_v.shape == (1, 1, 4) and not mha.add_zero_attn
    assert list(mha.state_dict())[:4] == ["in_proj_weight", "in_proj_bias", "bias_k", "bias_v"]
    plain = microtensor.nn.MultiheadAttention(4, 2, add_zero_attn=True)
    assert plain.bias_k is None and plain.bias_v is None and plain.add_zero_attn
    assert "bias_k" not in plain.state_dict()


# --------------------------------------------------------------------------- torch.backends

@pytest.fixture
def restore_flags():
    """The backends' flags and the matmul precision as they were before the test."""
    backends = microtensor.backends
    saved = {name: getattr(backends.cudnn, name)
             for name in ("enabled", "benchmark", "deterministic", "allow_tf32")}
    precision = microtensor.get_float32_matmul_precision()
    kernels = dict(microtensor.backends.flags.SDP_KERNELS)
    yield
    for name, value in saved.items():
        setattr(backends.cudnn, name, value)
    microtensor.set_float32_matmul_precision(precision)
    microtensor.backends.flags.SDP_KERNELS.update(kernels)


_CUDNN_FLAGS = ("enabled", "benchmark", "deterministic", "allow_tf32")


def test_cudnn_flags_as_programs_set_them(restore_flags):
    cudnn = microtensor.backends.cudnn
    defaults = {name: getattr(cudnn, name) for name in _CUDNN_FLAGS}
    assert defaults == {"enabled": True, "benchmark": False, "deterministic": False,
                        "allow_tf32": True}
    assert cudnn.is_available() is False and cudnn.version() is None
    cudnn.benchmark = True
    cudnn.deterministic = True
    assert cudnn.benchmark is True and cudnn.deterministic is True
    x = microtensor.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4))
    conv = microtensor.nn.Conv1d(3, 2, 2)
    before = conv(x)
    cudnn.enabled = False
    assert microtensor.equal(conv(x), before)     # a flag changes no result
    if _torch is not None:
        assert defaults == {name: getattr(_torch.backends.cudnn, name)
                            for name in _CUDNN_FLAGS}
        assert cudnn.is_available() == _torch.backends.cudnn.is_available()


@pytest.mark.parametrize("name", _CUDNN_FLAGS)
@pytest.mark.parametrize("value", [1, "yes"])
def test_cudnn_flags_refuse_non_bools(restore_flags, name, value):
    cudnn = microtensor.backends.cudnn
    before = getattr(cudnn, name)
    with pytest.raises(RuntimeError, match=f"set_{name}_cudnn expects a bool, but got"):
        setattr(cudnn, name, value)
    assert getattr(cudnn, name) is before
    if _torch is not None:
        with pytest.raises(RuntimeError, match="expects a bool, but got"):
            setattr(_torch.backends.cudnn, name, value)


def test_matmul_allow_tf32_is_the_float32_matmul_precision(restore_flags):
    matmul = microtensor.backends.cuda.matmul
    assert matmul.allow_tf32 is False
    microtensor.set_float32_matmul_precision("high")
    assert matmul.allow_tf32 is True
    matmul.allow_tf32 = False
    assert microtensor.get_float32_matmul_precision() == "highest"
    a = microtensor.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    before = a @ a.T
    matmul.allow_tf32 = True
    assert microtensor.get_float32_matmul_precision() == "high"
    assert microtensor.equal(a @ a.T, before)     # float32 products stay float32
    with pytest.raises(RuntimeError, match="set_allow_tf32_cublas expects a bool"):
        matmul.allow_tf32 = 1
    with pytest.raises(TypeError, match="expects a bool or a tuple/list of bools"):
        matmul.allow_fp16_reduced_precision_reduction = "no"
    matmul.allow_bf16_reduced_precision_reduction = (False, True)
    matmul.allow_bf16_reduced_precision_reduction = True
    with pytest.raises(AttributeError, match="Unknown attribute allow_tf33"):
        matmul.allow_tf33 = True
    if _torch is not None:
        reference = _torch.backends.cuda.matmul
        assert reference.allow_tf32 is False
        for name in ("allow_fp16_reduced_precision_reduction",
                     "allow_bf16_reduced_precision_reduction", "allow_fp16_accumulation"):
            assert getattr(matmul, name) == getattr(reference, name), name
        with pytest.raises(AttributeError, match="Unknown attribute allow_tf33"):
            reference.allow_tf33 = True


def test_device_availability_questions():
    backends = microtensor.backends
    assert backends.mps.is_available() is False and backends.mps.is_built() is False
    assert backends.cuda.is_built() in (True, False)
    if _torch is not None:
        assert backends.mps.is_available() == _torch.backends.mps.is_available()


_KERNELS = ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled",
            "cudnn_sdp_enabled")


def _kernels(lib):
    return [getattr(lib.backends.cuda, name)() for name in _KERNELS]


def test_sdpa_kernel_choice_is_recorded_and_restored(restore_flags):
    from microtensor.nn.attention import SDPBackend, sdpa_kernel
    F = microtensor.nn.functional
    q = microtensor.tensor(np.sin(np.arange(24, dtype=np.float32)).reshape(1, 2, 3, 4))
    before = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    chosen = [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, [SDPBackend.FLASH_ATTENTION,
              SDPBackend.EFFICIENT_ATTENTION], [SDPBackend.CUDNN_ATTENTION]]
    seen = []
    for backends in chosen:
        with sdpa_kernel(backends) as context:
            assert context == {}
            seen.append(_kernels(microtensor))
            out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            assert microtensor.equal(out, before)     # always the math kernel
        assert _kernels(microtensor) == [True] * 4
    assert seen[0] == [False, False, True, False]
    with pytest.raises(AssertionError, match="Backend must be an instance of SDPBackend"):
        with sdpa_kernel("math"):
            pass
    microtensor.backends.cuda.enable_flash_sdp(False)
    assert _kernels(microtensor) == [False, True, True, True]
    with pytest.raises(RuntimeError, match="expects a bool"):
        microtensor.backends.cuda.enable_math_sdp(0)
    with pytest.warns(FutureWarning, match="sdp_kernel\\(\\)` is deprecated"), \
            microtensor.backends.cuda.sdp_kernel(enable_math=False):
        assert _kernels(microtensor) == [True, True, False, True]
    assert _kernels(microtensor) == [False, True, True, True]
    if _torch is not None:
        from torch.nn import attention as reference
        assert {m: int(v) for m, v in SDPBackend.__members__.items()} == \
            {m: int(v) for m, v in reference.SDPBackend.__members__.items()}
        expected = []
        for backends in chosen:
            same = getattr(reference.SDPBackend, backends.name) \
                if isinstance(backends, SDPBackend) \
                else [getattr(reference.SDPBackend, b.name) for b in backends]
            with reference.sdpa_kernel(same):
                expected.append(_kernels(_torch))
        assert seen == expected


# --------------------------------------------------------------------------- training utilities

def checkpointed_lm(torch, init, optimizer_name="AdamW", steps=8, save_to=None, save_at=4,
                    resume_from=None, checkpoint=None):
    """A small LSTM language model trained with an optimizer and OneCycleLR (which also
    cycles the momentum or beta1); ``save_to`` writes model, optimizer, scheduler and step
    with torch.save after ``save_at`` steps; ``resume_from`` (a path) or ``checkpoint`` (a
    loaded dict) restores them and continues to ``steps``."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(9, 4), nn.LSTM(4, 5, batch_first=True))
    head = nn.Linear(5, 9)
    if optimizer_name == "AdamW":
        optimizer = torch.optim.AdamW([{"params": model.parameters()},
                                       {"params": head.parameters(), "weight_decay": 0.0,
                                        "lr": 3e-3}], lr=1e-2, amsgrad=True)
        max_lr = [2e-2, 5e-3]
    else:
        optimizer = getattr(torch.optim, optimizer_name)(
            list(model.parameters()) + list(head.parameters()), lr=1e-2)
        max_lr = 2e-2
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=max_lr, total_steps=10,
        cycle_momentum=optimizer_name not in ("Adagrad", "Adadelta"))
    _load(torch, model, init and init["model"])
    _load(torch, head, init and init["head"])
    res = {"init": {"model": _state(model), "head": _state(head)}}
    start = 0
    if resume_from is not None:
        checkpoint = torch.load(resume_from, weights_only=True)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        head.load_state_dict(checkpoint["head"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        start = checkpoint["step"]
    data = (np.arange(steps * 12).reshape(steps, 2, 6) * 7 + 3) % 9
    losses = []
    for step in range(start, steps):
        x = torch.tensor(data[step])
        out, _ = model(x)
        loss = nn.functional.cross_entropy(head(out[:, :-1]).reshape(-1, 9),
                                           x[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if save_to is not None and step + 1 == save_at:
            torch.save({"model": model.state_dict(), "head": head.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "step": step + 1}, save_to)
    res.update(losses=losses, model=_state(model), head=_state(head),
               lrs=scheduler.get_last_lr())
    return res


_CHECKPOINT_OPTIMIZERS = ["AdamW", "SGD", "NAdam", "Adagrad"]


@pytest.mark.parametrize("optimizer_name", _CHECKPOINT_OPTIMIZERS)
def test_resuming_from_a_checkpoint_reproduces_the_run(tmp_path, optimizer_name):
    path = str(tmp_path / "checkpoint.pt")
    full = _numpy(checkpointed_lm(microtensor, None, optimizer_name, save_to=path))
    resumed = _numpy(checkpointed_lm(microtensor, None, optimizer_name, resume_from=path))
    assert resumed["losses"] == full["losses"][4:]
    for key in ("model", "head", "lrs"):
        _assert_same(resumed[key], full[key], key, rtol=0, atol=0)


def _via_numpy(obj, lib):
    """A saved object with every tensor passed through NumPy into ``lib``."""
    if hasattr(obj, "detach"):
        return lib.tensor(obj.detach().numpy())
    if isinstance(obj, dict):
        return {k: _via_numpy(v, lib) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_via_numpy(v, lib) for v in obj)
    return obj


@needs_torch
@pytest.mark.parametrize("optimizer_name", _CHECKPOINT_OPTIMIZERS)
@pytest.mark.parametrize("route", ["numpy", "file"])
def test_a_pytorch_checkpoint_resumes_in_microtensor(tmp_path, optimizer_name, route):
    path = str(tmp_path / "torch.pt")
    reference = _numpy(checkpointed_lm(_torch, None, optimizer_name, save_to=path))
    init = reference.pop("init")
    if route == "numpy":
        checkpoint = _via_numpy(_torch.load(path, weights_only=True), microtensor)
        got = checkpointed_lm(microtensor, init, optimizer_name, checkpoint=checkpoint)
    else:
        got = checkpointed_lm(microtensor, init, optimizer_name, resume_from=path)
    got = _numpy(got)
    np.testing.assert_allclose(got["losses"], reference["losses"][4:], rtol=1e-5)
    for key in ("model", "head", "lrs"):
        _assert_same(got[key], reference[key], key, rtol=1e-5, atol=1e-6)


@needs_torch
@pytest.mark.parametrize("optimizer_name", ["AdamW", "SGD"])
def test_checkpointed_training_matches_pytorch(optimizer_name):
    _compare(checkpointed_lm, rtol=1e-5, atol=1e-6, optimizer_name=optimizer_name)


def reduced_precision(torch, init, dtype="float16"):
    """``model.half()`` / ``model.to(torch.bfloat16)`` of a model with every sequence
    layer: the parameters' and buffers' dtypes, an eval forward, a training backward."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(10, 8, padding_idx=0)
            self.norm = nn.LayerNorm(8)
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
            self.gru = nn.GRU(8, 8, batch_first=True)
            self.lstm = nn.LSTM(8, 8, batch_first=True)
            self.conv = nn.Conv1d(8, 8, 3, padding=1)
            self.bn = nn.BatchNorm1d(8)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            h = self.norm(self.embedding(x))
            a, weights = self.attention(h, h, h)
            r, _ = self.lstm(self.gru(a)[0])
            c = F.gelu(self.bn(self.conv(r.transpose(1, 2)))).transpose(1, 2)
            c = F.scaled_dot_product_attention(c, c, c, is_causal=True)
            return self.fc(c).softmax(-1), weights

    model = Net()
    _load(torch, model, init)
    res = {"init": _state(model)}
    model.eval()
    model = model.half() if dtype == "float16" else model.to(getattr(torch, dtype))
    res["dtypes"] = [str(t.dtype).split(".")[-1]
                     for t in list(model.parameters()) + list(model.buffers())]
    x = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    with torch.no_grad():
        out, weights = model(x)
    res.update(out=out, weights=weights, out_dtype=str(out.dtype).split(".")[-1])
    model.train()
    out, _ = model(x)
    out.float().sum().backward()
    res["grad_dtype"] = str(model.fc.weight.grad.dtype).split(".")[-1]
    return res


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_forward(dtype):
    _compare(reduced_precision, rtol=2e-2, atol=2e-2, dtype=dtype)


def sequence_utilities(torch, init):
    """The rest of what sequence programs call: pad/pack/unpack helpers (padding_side,
    total_length), an LSTM with proj_size over an unsorted PackedSequence from given
    (h0, c0), unbatched GRU and LSTMCell input, Embedding.from_pretrained and max_norm,
    MultiheadAttention with kdim/vdim and per-head weights, a standalone decoder layer,
    cross entropy over (N, C, T) with ignore_index / probabilities / label smoothing, and
    the gradient-norm helpers."""
    nn = torch.nn
    F = torch.nn.functional
    rnn_utils = torch.nn.utils.rnn
    torch.manual_seed(0)
    init = init or {}
    models = {}

    def model(name, module):
        _load(torch, module, init.get(name))
        models[name] = _state(module)
        return module

    def t(shape, start=0.0, **kwargs):
        values = np.sin(start + np.arange(int(np.prod(shape))) * 0.7).astype(np.float32)
        return torch.tensor(values.reshape(shape), **kwargs)

    res = {}
    seqs = [t((n, 3), start=n) for n in (2, 5, 3)]
    res["pad"] = rnn_utils.pad_sequence(seqs, batch_first=True, padding_value=-1.0)
    res["pad_left"] = rnn_utils.pad_sequence(seqs, batch_first=True, padding_side="left")
    res["pad_time_first"] = rnn_utils.pad_sequence(seqs)
    packed = rnn_utils.pack_sequence(seqs, enforce_sorted=False)
    res["packed"] = [packed.data, packed.batch_sizes, packed.sorted_indices,
                     packed.unsorted_indices]
    res["unpacked"] = torch.cat(rnn_utils.unpack_sequence(packed))
    padded, lengths = rnn_utils.pad_packed_sequence(packed, batch_first=True, total_length=7)
    res["total_length"] = padded
    res["unpadded"] = torch.cat(rnn_utils.unpad_sequence(padded, lengths, batch_first=True))
    lstm = model("lstm", nn.LSTM(3, 4, num_layers=2, proj_size=2, bidirectional=True))
    h0 = t((4, 3, 2), 1.0, requires_grad=True)
    c0 = t((4, 3, 4), 2.0, requires_grad=True)
    lstm.flatten_parameters()
    out, (hn, cn) = lstm(packed, (h0, c0))
    out, _ = rnn_utils.pad_packed_sequence(out)
    (out.sum() + hn.pow(2).sum() + cn.sum()).backward()
    res["lstm"] = [out, hn, cn, h0.grad, c0.grad, _grads(lstm)]
    gru = model("gru", nn.GRU(3, 4))
    res["unbatched_gru"] = list(gru(seqs[1]))
    cell = model("cell", nn.LSTMCell(3, 4))
    hx, steps = None, []
    for xt in seqs[1]:
        hx = cell(xt, hx)
        steps.append(hx[0])
    res["unbatched_cell"] = torch.stack(steps)
    embedding = nn.Embedding.from_pretrained(t((6, 3)), freeze=False, padding_idx=2)
    index = torch.tensor([[0, 2, 5], [2, 2, 1]])
    embedding(index).sum().backward()
    res["from_pretrained"] = [embedding.weight.grad, embedding.weight.requires_grad]
    bounded = nn.Embedding(6, 3, max_norm=1.0)
    with torch.no_grad():
        bounded.weight.copy_(t((6, 3), 3.0))
    res["max_norm"] = [bounded(index), bounded.weight]
    res["one_hot"] = F.one_hot(index, 6)
    mha = model("mha", nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True))
    query, key, value = t((2, 3, 4)), t((2, 5, 3), 1.0), t((2, 5, 5), 2.0)
    attn_mask = t((4, 3, 5), 3.0) > 0.4
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    res["mha_per_head"] = list(mha(query, key, value, key_padding_mask=padding,
                                   attn_mask=attn_mask, average_attn_weights=False))
    layer = model("decoder_layer", nn.TransformerDecoderLayer(
        4, 2, 8, dropout=0.0, batch_first=True, norm_first=True, activation=F.silu,
        bias=False))
    res["decoder_layer"] = layer(query, query,
                                 tgt_mask=nn.Transformer.generate_square_subsequent_mask(3),
                                 tgt_is_causal=True,
                                 memory_key_padding_mask=torch.tensor([[False, False, True],
                                                                       [False] * 3]))
    logits = t((2, 5, 4), 4.0, requires_grad=True)
    targets = torch.tensor([[1, 2, -100, 4], [3, -100, -100, 1]])
    losses = [
        F.cross_entropy(logits, targets, label_smoothing=0.1),
        nn.CrossEntropyLoss(ignore_index=1, label_smoothing=0.2, reduction="sum")(
            logits.transpose(1, 2).reshape(8, 5), torch.tensor([1, 2, 3, 4, 0, 3, 1, 1])),
        F.cross_entropy(logits, F.softmax(t((2, 5, 4), 5.0), 1), label_smoothing=0.3),
        F.nll_loss(F.log_softmax(logits, 1), targets, reduction="none").sum()]
    sum(losses).backward()
    res["losses"], res["logits_grad"] = losses, logits.grad
    params = [t((3, 2), 6.0 + i, requires_grad=True) for i in range(2)]
    for p in params:
        (p * 2).sum().backward()
    res["clip_inf"] = torch.nn.utils.clip_grad_norm_(params, 0.5, norm_type="inf")
    res["clip_l1"] = torch.nn.utils.clip_grad_norm_(params, 0.1, norm_type=1.0,
                                                    error_if_nonfinite=True)
    total = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
    torch.nn.utils.clip_grads_with_norm_(params, 0.01, total)
    res["clipped"] = [total, params[0].grad, params[1].grad]
    vector = torch.nn.utils.parameters_to_vector(params)
    torch.nn.utils.vector_to_parameters(vector * 2, params)
    res["vector"] = [vector, params[1]]
    res["init"] = models
    return res


@needs_torch
def test_sequence_utilities():
    _compare(sequence_utilities)


@pytest.mark.parametrize("lib_name", ["microtensor", "torch"])
def test_detect_anomaly_names_the_backward_that_made_nan(lib_name):
    lib = microtensor if lib_name == "microtensor" else _torch
    if lib is None:
        pytest.skip("PyTorch is not installed: nothing to compare against")
    x = lib.tensor([0.0, 1.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Error detected in SqrtBackward0"), \
            lib.autograd.set_detect_anomaly(True):
        loss = (x.sqrt() * 0).sum()
        with pytest.raises(RuntimeError, match="Function 'SqrtBackward0' returned nan "
                                               "values in its 0th output."):
            loss.backward()
    assert not lib.is_anomaly_enabled()


def test_sampling_draws_from_the_softmax_of_the_tempered_logits():
    """Sampling as language models decode (temperature, top-k, multinomial): the
    frequencies follow the probabilities (microtensor's random stream is its own, so the
    draws are compared by their statistics)."""
    torch = microtensor
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0], [0.0, 0.0, 3.0, 1.0, -2.0]])
    temperature, top_k = 0.7, 3
    scaled = logits / temperature
    v, _ = torch.topk(scaled, top_k)
    scaled[scaled < v[:, [-1]]] = -float("Inf")
    probs = torch.nn.functional.softmax(scaled, dim=-1)
    draws = 20000
    samples = torch.multinomial(probs, draws, replacement=True)
    assert samples.shape == (2, draws) and samples.dtype == torch.int64
    counts = np.stack([np.bincount(row, minlength=5) for row in samples.numpy()])
    expected = probs.numpy() * draws
    assert (counts[expected == 0] == 0).all()     # masked tokens are never drawn
    assert np.abs(counts - expected).max() < 5 * np.sqrt(draws * 0.25)
    once = torch.multinomial(probs, 3)            # without replacement: distinct
    assert all(len(set(row)) == 3 for row in once.tolist())
    assert torch.argmax(probs, dim=-1).tolist() == [0, 2]
    if _torch is not None:
        ref = _torch.tensor(logits.numpy()) / temperature
        rv, _ = _torch.topk(ref, top_k)
        ref[ref < rv[:, [-1]]] = -float("Inf")
        np.testing.assert_allclose(probs.numpy(), _torch.softmax(ref, -1).numpy(), rtol=1e-6)


def encoder_inference(torch, init, batch_first=True, norm_first=False, grad=False,
                      causal=False, float_padding=False, nhead=2, right_padded=False,
                      fastpath=True):
    """A TransformerEncoder classifier in eval mode over padded sequences: where PyTorch
    takes its nested-tensor path the padded outputs are zeros, which the mean over every
    position (a common pooling) sees."""
    nn = torch.nn
    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(fastpath)
    try:
        layer = nn.TransformerEncoderLayer(8, nhead, 16, batch_first=batch_first,
                                           norm_first=norm_first)
        encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
        _load(torch, encoder, init)
        res = {"init": _state(encoder), "use_nested_tensor": encoder.use_nested_tensor}
        x = torch.tensor(np.sin(np.arange(120)).reshape(3, 5, 8).astype(np.float32))
        padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2,
                                [False] + [True] * 4])
        if right_padded:
            padding[1] = torch.tensor([True, True, False, False, False])
        if float_padding:
            padding = torch.zeros(3, 5).masked_fill(padding, float("-inf"))
        if not batch_first:
            x = x.transpose(0, 1)
        mask = nn.Transformer.generate_square_subsequent_mask(5) if causal else None
        encoder.eval()
        with torch.set_grad_enabled(grad):
            out = encoder(x, mask=mask, src_key_padding_mask=padding)
        res.update(out=out, pooled=out.mean(dim=1 if batch_first else 0))
        return res
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


@needs_torch
@pytest.mark.parametrize("options", [
    {}, {"grad": True}, {"batch_first": False}, {"norm_first": True}, {"causal": True},
    {"float_padding": True}, {"nhead": 1}, {"right_padded": True}, {"fastpath": False}],
    ids=lambda options: "-".join(options) or "nested")
def test_transformer_encoder_inference_zeros_padded_outputs_as_pytorch(options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _compare(encoder_inference, **options)
    # zeros before the final LayerNorm, which (as initialised) maps them to its bias, 0
    padded = got["out"][2, 1:] if options.get("batch_first", True) else got["out"][1:, 2]
    assert (padded == 0).all() == (options in ({}, {"float_padding": True}))
    expected_reason = {"batch_first": "batch_first was not True", "norm_first":
                       "norm_first was True", "nhead": "num_heads is odd"}
    notes = [str(w.message) for w in caught if str(w.message).startswith(
        "enable_nested_tensor is True") and w.filename == __file__]
    reasons = [r for k, r in expected_reason.items() if k in options]
    assert len(notes) == 2 * len(reasons)       # once per library
    assert all(reasons[0] in n for n in notes)


def test_transformer_encoder_zeros_only_on_the_nested_path():
    nn = microtensor.nn
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8, batch_first=True), 1)
    encoder.eval()
    x = microtensor.ones(2, 3, 4)
    padding = microtensor.tensor([[False, False, True], [False, False, False]])
    with microtensor.no_grad():
        out = encoder(x, src_key_padding_mask=padding)
    assert (out[0, 2] == 0).all() and (out[0, :2] != 0).any() and (out[1] != 0).any()
    train_out = encoder.train()(x, src_key_padding_mask=padding)
    assert (train_out[0, 2] != 0).any()          # dropout aside, training computes them
    encoder.eval()
    assert (encoder(x, src_key_padding_mask=padding)[0, 2] != 0).any()  # grad recorded


def adaptive_softmax_lm(torch, init):
    """A word language model with an adaptive softmax output (fairseq's and
    transformer-XL's shape): an LSTM, AdaptiveLogSoftmaxWithLoss trained with Adagrad,
    then log_prob over the whole vocabulary and predict."""
    nn = torch.nn
    torch.manual_seed(0)

    class AdaptiveLM(nn.Module):
        def __init__(self, vocab=20, hidden=6):
            super().__init__()
            self.embedding = nn.Embedding(vocab, hidden)
            self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
            self.out = nn.AdaptiveLogSoftmaxWithLoss(hidden, vocab, cutoffs=[5, 12],
                                                     div_value=2.0, head_bias=True)

        def forward(self, x, targets):
            h, _ = self.lstm(self.embedding(x))
            return self.out(h.reshape(-1, h.size(-1)), targets.reshape(-1)), h

    model = AdaptiveLM()
    _load(torch, model, init)
    res = {"init": _state(model), "repr": repr(model.out).replace("microtensor", "torch")}
    data = torch.tensor((np.arange(2 * 9) * 7 % 20).reshape(2, 9))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        (output, loss), h = model(data[:, :-1], data[:, 1:])
        loss.backward()
        if step == 0:
            res.update(output=output, grads=_grads(model))
        optimizer.step()
    res.update(loss=loss, state=_state(model))
    with torch.no_grad():
        flat = h.reshape(-1, 6)
        res["log_prob"] = model.out.log_prob(flat)
        res["predict"] = model.out.predict(flat)
        res["predict_scaled"] = model.out.predict(flat * 8)   # rows whose head picks a tail
        one = model.out(flat[0], torch.tensor(13))
        res["unbatched"] = [one.output, one.loss]
    return res


@needs_torch
def test_adaptive_softmax_language_model():
    got = _compare(adaptive_softmax_lm)
    np.testing.assert_allclose(np.exp(got["log_prob"]).sum(1), 1.0, rtol=1e-5)


def _error_of(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001
        return type(e), str(e).replace("microtensor", "torch")
    return None


@pytest.mark.parametrize("make, call", [
    (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(6, 20, []), None),
    (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(6, 20, [12, 5]), None),
    (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(6, 20, [5, 20]), None),
    (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(6, 20, [5]), lambda lib: (lib.zeros(3, 6),
                                                                        lib.tensor([1, 2]))),
    (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(6, 20, [5]), lambda lib: (lib.zeros(3, 6),
                                                                        lib.tensor([1, 2, 20]))),
    (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(6, 20, [5]), lambda lib: (lib.zeros(2, 6),
                                                                        lib.tensor(3))),
    (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(6, 20, [5]), lambda lib: (lib.zeros(2, 6),
                                                                        lib.zeros(2, 2))),
])
def test_adaptive_softmax_refuses_as_pytorch(make, call):
    def attempt(lib):
        module = make(lib.nn)
        if call is not None:
            module(*call(lib))
    error = _error_of(lambda: attempt(microtensor))
    assert error is not None
    if _torch is not None:
        assert error == _error_of(lambda: attempt(_torch))


def training_extras(torch, init):
    """What sequence training loops do around the model: a DataLoader with a padding
    collate_fn and dict samples, beam-search bookkeeping (topk over flattened scores,
    floor division, gather, scatter_), Categorical over logits, weight norm (the
    parametrization and the old hook on an RNN weight), GradScaler with unscale_ and
    clipping, hooks, retain_grad, a gradient penalty through create_graph, resetting the
    hidden state of finished sequences in place, scale_grad_by_freq, dilated causal
    convolutions, KL-divergence label smoothing, ReduceLROnPlateau and SWA."""
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)
    init = init or {}
    models, res = {}, {}

    def model(name, module):
        _load(torch, module, init.get(name))
        models[name] = _state(module)
        return module

    def t(shape, start=0.0, **kwargs):
        values = np.sin(start + np.arange(int(np.prod(shape))) * 0.7).astype(np.float32)
        return torch.tensor(values.reshape(shape), **kwargs)

    samples = [(torch.tensor([1, 2, 3]), 0), (torch.tensor([4, 5]), 1), (torch.tensor([6]), 1),
               (torch.tensor([7, 8, 9, 10]), 0)]

    def collate(batch):
        seqs, labels = zip(*batch)
        return (torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True),
                torch.tensor([len(s) for s in seqs]), torch.tensor(labels))

    loader = torch.utils.data.DataLoader(samples, batch_size=2, collate_fn=collate)
    res["collate"] = [list(batch) for batch in loader]
    records = [{"ids": torch.tensor([i, i + 1]), "label": i % 2, "w": float(i)}
               for i in range(4)]
    batch = next(iter(torch.utils.data.DataLoader(records, batch_size=4)))
    res["dict_collate"] = [batch["ids"], batch["label"], batch["w"]]
    logp = F.log_softmax(t((3, 7)), -1)
    top, index = (t((3,), 1.0).unsqueeze(1) + logp).view(-1).topk(4)
    res["beam"] = [top, index, index // 7, index % 7,
                   torch.div(index, 7, rounding_mode="floor")]
    res["gather"] = logp.gather(1, torch.tensor([[0], [3], [6]]))
    res["scatter"] = torch.zeros(3, 7).scatter_(1, torch.tensor([[1, 2], [0, 0], [6, 5]]), 1.0)
    categorical = torch.distributions.Categorical(logits=t((2, 5)))
    res["categorical"] = [categorical.probs, categorical.entropy(),
                          categorical.log_prob(torch.tensor([1, 4]))]
    linear = torch.nn.utils.parametrizations.weight_norm(model("linear", nn.Linear(4, 3)))
    out = linear(t((2, 4)))
    out.sum().backward()
    res["weight_norm"] = [list(linear.state_dict()), out,
                          linear.parametrizations.weight.original0.grad,
                          linear.parametrizations.weight.original1.grad]
    gru = torch.nn.utils.weight_norm(model("gru", nn.GRU(3, 4)), name="weight_hh_l0")
    out, h = gru(t((5, 2, 3)))
    (out.sum() + h.sum()).backward()
    res["weight_norm_rnn"] = [list(gru.state_dict()), out, gru.weight_hh_l0_g.grad,
                              gru.weight_hh_l0_v.grad]
    scaled = model("scaled", nn.Linear(4, 2))
    optimizer = torch.optim.SGD(scaled.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    for _ in range(2):
        optimizer.zero_grad()
        scaler.scale(scaled(t((3, 4))).pow(2).mean()).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(scaled.parameters(), 0.1)
        scaler.step(optimizer)
        scaler.update()
    res["grad_scaler"] = [scaled.weight, scaler.get_scale(), scaler.state_dict()]
    embedding = model("embedding", nn.Embedding(8, 3))
    rnn = model("rnn", nn.GRU(3, 4, batch_first=True))
    head = model("head", nn.Linear(4, 2))
    seen = []
    handles = [rnn.register_full_backward_hook(
                   lambda m, gi, go: seen.append([g for g in go if g is not None])),
               rnn.register_forward_hook(lambda m, i, o: seen.append(o[0].detach().clone()))]
    embedded = embedding(torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]]))
    embedded.retain_grad()
    out, h = rnn(embedded)
    h = h.clone()
    h[:, torch.tensor([False, True])] = 0.0      # finished sequences start afresh
    loss = F.cross_entropy(head(h[0]), torch.tensor([0, 1]))
    grad, = torch.autograd.grad(loss, embedded, create_graph=True)
    (loss + grad.pow(2).sum()).backward()
    for handle in handles:
        handle.remove()
    res["hooks"] = [seen, embedded.grad, _grads(embedding), _grads(rnn)]
    frequent = model("frequent", nn.Embedding(10, 3, scale_grad_by_freq=True, padding_idx=0))
    frequent(torch.tensor([[1, 2, 1], [9, 0, 2]])).sum().backward()
    res["scale_grad_by_freq"] = frequent.weight.grad
    conv = model("conv", nn.Conv1d(2, 2, 2, dilation=2))
    x = t((1, 2, 7), requires_grad=True)
    y = conv(F.pad(x, (2, 0)))
    y.sum().backward()
    res["causal_conv"] = [y, x.grad, conv.weight.grad]
    res["same_conv"] = model("same", nn.Conv1d(2, 3, 4, padding="same", dilation=2))(t((1, 2, 7)))
    log_probs = F.log_softmax(t((3, 5)), -1)
    smoothed = torch.full((3, 5), 0.1 / 4)
    smoothed[torch.arange(3), torch.tensor([0, 2, 4])] = 0.9
    res["kl_smoothing"] = [nn.KLDivLoss(reduction="batchmean")(log_probs, smoothed),
                           F.kl_div(log_probs, smoothed.log(), reduction="sum",
                                    log_target=True)]
    base = model("base", nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    swa = torch.optim.swa_utils.AveragedModel(base)
    for k in range(3):
        with torch.no_grad():
            for p in base.parameters():
                p.add_(0.1 * (k + 1))
        swa.update_parameters(base)
    torch.optim.swa_utils.update_bn([t((4, 3), 1.0), t((4, 3), 2.0)], swa)
    res["swa"] = _state(swa)
    optimizer = torch.optim.SGD(base.parameters(), lr=1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1, factor=0.5)
    lrs = []
    for metric in [1.0, 0.9, 0.95, 0.96, 0.97, 0.5]:
        plateau.step(metric)
        lrs.append(optimizer.param_groups[0]["lr"])
    res["plateau"] = lrs
    res["init"] = models
    return res


@needs_torch
@pytest.mark.filterwarnings("ignore:.*weight_norm` is deprecated:FutureWarning")
def test_training_extras():
    _compare(training_extras)


def per_sample_rnn_gradients(torch, init):
    """Per-sample gradients of a GRU and an LSTMCell with torch.func (grad of a
    functional_call, one sample at a time: PyTorch's recurrent layers have no batching
    rule), and jacrev through MultiheadAttention."""
    nn = torch.nn
    F = torch.nn.functional
    func = torch.func
    torch.manual_seed(0)
    gru, cell = nn.GRU(3, 4, batch_first=True), nn.LSTMCell(3, 4)
    attention = nn.MultiheadAttention(4, 2, batch_first=True)
    init = init or {}
    for name, module in (("gru", gru), ("cell", cell), ("attention", attention)):
        _load(torch, module, init.get(name))
    res = {"init": {name: _state(m) for name, m in (("gru", gru), ("cell", cell),
                                                     ("attention", attention))}}
    values = np.sin(np.arange(60) * 0.7).astype(np.float32)
    xs = torch.tensor(values[:36].reshape(3, 4, 3))
    targets = torch.tensor(values[:12].reshape(3, 4))
    gru_params = {k: v.detach() for k, v in gru.named_parameters()}

    def gru_loss(params, x, target):
        _, h = func.functional_call(gru, params, (x.unsqueeze(0),))
        return F.mse_loss(h[0, 0], target)

    cell_params = {k: v.detach() for k, v in cell.named_parameters()}

    def cell_loss(params, x):
        h, c = func.functional_call(cell, params, (x,))
        return h.sum() + c.pow(2).sum()

    res["gru"] = [func.grad(gru_loss)(gru_params, xs[i], targets[i]) for i in range(3)]
    res["cell"] = [func.grad(cell_loss)(cell_params, xs[0, i]) for i in range(4)]
    res["jacobian"] = func.jacrev(
        lambda x: attention(x, x, x, need_weights=False)[0].sum(-1))(
            torch.tensor(values[:12].reshape(1, 3, 4)))
    res["vmap_inputs"] = (gru_loss, gru_params, xs, targets, cell_loss, cell_params)
    return res


@needs_torch
def test_per_sample_rnn_gradients():
    ref = per_sample_rnn_gradients(_torch, None)
    ref.pop("vmap_inputs")
    ref = _numpy(ref)
    got = per_sample_rnn_gradients(microtensor, ref.pop("init"))
    got.pop("init")
    gru_loss, gru_params, xs, targets, cell_loss, cell_params = got.pop("vmap_inputs")
    _assert_same(_numpy(got), ref, "per_sample", 1e-4, 1e-5)
    # microtensor's recurrent layers batch under vmap: one call gives every sample's
    func = microtensor.func
    batched = func.vmap(func.grad(gru_loss), in_dims=(None, 0, 0))(gru_params, xs, targets)
    for name in gru_params:
        np.testing.assert_allclose(batched[name].numpy(),
                                   np.stack([r[name] for r in ref["gru"]]), rtol=1e-4,
                                   atol=1e-6, err_msg=name)
    batched = func.vmap(func.grad(cell_loss), in_dims=(None, 0))(cell_params, xs[0])
    for name in cell_params:
        np.testing.assert_allclose(batched[name].numpy(),
                                   np.stack([r[name] for r in ref["cell"]]), rtol=1e-4,
                                   atol=1e-6, err_msg=name)


def _attention_call(lib, shapes, mask_dtype="bool", **kwargs):
    q_shape, k_shape, v_shape = shapes
    values = np.sin(np.arange(200) * 0.9).astype(np.float32)

    def tensor(shape, start):
        return lib.tensor(values[start:start + int(np.prod(shape))].reshape(shape))

    query, key, value = tensor(q_shape, 0), tensor(k_shape, 50), tensor(v_shape, 100)
    mask = tensor((q_shape[-2], k_shape[-2]), 150)
    mask = mask > -0.5 if mask_dtype == "bool" else mask.to(getattr(lib, mask_dtype))
    return lib.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                                          **kwargs)


@pytest.mark.parametrize("shapes, kwargs", [
    (((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)), {}),
    (((2, 2, 4, 4), (2, 2, 4, 4), (2, 2, 4, 4)), {"mask_dtype": "float32"}),
    (((1, 4, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)), {"enable_gqa": True}),
    (((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3)), {}),            # head sizes differ
    (((2, 3, 4), (2, 5, 4), (2, 5, 4)), {}),                     # 3-D
    (((2, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)), {}),            # batch broadcast
    (((1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)), {"dropout_p": 0.5}),
])
def test_sdpa_causal_with_a_mask_where_pytorch_allows_it(shapes, kwargs):
    got = _error_of(lambda: _attention_call(microtensor, shapes, is_causal=True, **kwargs))
    if _torch is not None:
        assert got == _error_of(lambda: _attention_call(_torch, shapes, is_causal=True,
                                                        **kwargs))
        if got is None:
            np.testing.assert_allclose(
                _attention_call(microtensor, shapes, is_causal=True, **kwargs).numpy(),
                _attention_call(_torch, shapes, is_causal=True, **kwargs).numpy(),
                rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mask_dtype", ["int64", "uint8", "float64", "float16", "float32"])
def test_sdpa_mask_dtypes_as_pytorch(mask_dtype):
    shapes = ((1, 2, 3, 4),) * 3
    got = _error_of(lambda: _attention_call(microtensor, shapes, mask_dtype))
    assert (got is None) == (mask_dtype == "float32")
    if _torch is not None:
        assert got == _error_of(lambda: _attention_call(_torch, shapes, mask_dtype))


@pytest.mark.parametrize("query_shape, masks", [
    ((3, 2, 4), {"key_padding_mask": ("int64", (2, 3))}),
    ((3, 2, 4), {"key_padding_mask": ("bool", (2, 4))}),
    ((3, 2, 4), {"key_padding_mask": ("bool", (3, 2))}),      # (S, N): a silent misuse
    ((3, 2, 4), {"key_padding_mask": ("bool", (2, 3, 1))}),
    ((3, 2, 4), {"attn_mask": ("int64", (3, 3))}),
    ((3, 2, 4), {"attn_mask": ("float32", (5, 3, 3))}),
    ((3, 2, 4), {"attn_mask": ("float32", (2, 3))}),
    ((3, 2, 4), {"attn_mask": ("bool", (1, 1, 3, 3))}),
    ((3, 4), {"attn_mask": ("bool", (3, 3, 3))}),
    ((3, 4), {"key_padding_mask": ("bool", (1, 3))}),
    ((2, 3, 2, 4), {}),
])
def test_multihead_attention_refuses_masks_as_pytorch(query_shape, masks):
    def attempt(lib):
        mha = lib.nn.MultiheadAttention(4, 2)
        x = lib.zeros(query_shape)
        kwargs = {name: lib.zeros(shape, dtype=getattr(lib, dtype))
                  for name, (dtype, shape) in masks.items()}
        mha(x, x, x, **kwargs)
    got = _error_of(lambda: attempt(microtensor))
    assert got is not None
    if _torch is not None:
        assert got == _error_of(lambda: attempt(_torch))


@pytest.mark.parametrize("values, dtype, num_classes", [
    ([0, 3], "int64", 2), ([-1, 1], "int64", 3), ([0, 1], "int64", 0), ([], "int64", -1),
    ([], "int64", 3), ([1, 2], "int64", -2), ([1, 2], "int32", 3), ([1, 2], "int64", -1),
    ([[0, 2], [1, 1]], "int64", 4)])
def test_one_hot_checks_class_values_as_pytorch(values, dtype, num_classes):
    """A class out of range was a row of zeros (a label-smoothing target silently wrong)."""
    def call(lib):
        return lib.nn.functional.one_hot(lib.tensor(values, dtype=getattr(lib, dtype)),
                                         num_classes)
    got = _error_of(lambda: call(microtensor))
    ok = dtype == "int64" and (num_classes in (-1, 4) and values or num_classes == 3
                               and not values)
    assert (got is None) == bool(ok)
    if _torch is not None:
        assert got == _error_of(lambda: call(_torch))
        if got is None:
            assert call(microtensor).tolist() == call(_torch).tolist()


def test_one_hot_under_vmap_as_pytorch():
    F = microtensor.nn.functional
    batch = microtensor.tensor([[0, 1], [2, 3]])
    out = microtensor.func.vmap(lambda x: F.one_hot(x, 3))(batch)
    assert out.tolist() == [[[1, 0, 0], [0, 1, 0]], [[0, 0, 1], [0, 0, 0]]]
    with pytest.raises(RuntimeError, match="please provide an explicit positive num_classes"):
        microtensor.func.vmap(F.one_hot)(batch)
    if _torch is not None:
        ref = _torch.func.vmap(lambda x: _torch.nn.functional.one_hot(x, 3))(
            _torch.tensor(batch.tolist()))
        assert out.tolist() == ref.tolist()


@pytest.mark.parametrize("loss", ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
def test_pointwise_losses_warn_when_the_target_broadcasts(loss):
    """A regression head's (N, 1) output against (N,) targets averages N*N differences:
    PyTorch warns, and so does microtensor."""
    fn = getattr(microtensor.nn.functional, loss)
    with pytest.warns(UserWarning, match=r"Using a target size \(microtensor.Size\(\[2\]\)\) "
                                         r"that is different to the input size"):
        broadcast = fn(microtensor.zeros(2, 1), microtensor.tensor([1.0, 3.0]))
    assert broadcast.item() == fn(microtensor.zeros(2, 2),
                                  microtensor.tensor([[1.0, 3.0], [1.0, 3.0]])).item()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn(microtensor.zeros(2), microtensor.ones(2))


@pytest.mark.parametrize("call", [
    lambda lib: lib.nn.functional.binary_cross_entropy_with_logits(lib.zeros(2, 1),
                                                                   lib.ones(2)),
    lambda lib: lib.nn.BCEWithLogitsLoss()(lib.zeros(3), lib.ones(3, 1)),
])
def test_bce_with_logits_refuses_a_target_of_another_shape(call):
    """It broadcast silently (an (N, 1) output against (N,) labels gave an N x N loss)."""
    got = _error_of(lambda: call(microtensor))
    assert got is not None and got[0] is ValueError
    if _torch is not None:
        assert got == _error_of(lambda: call(_torch))


@pytest.mark.parametrize("options, shapes", [
    ({}, ((3, 2, 4), (5, 2, 4), (4, 2, 4))),
    ({"batch_first": True}, ((2, 3, 4), (2, 5, 4), (2, 4, 4))),
    ({"kdim": 3, "vdim": 5}, ((3, 2, 4), (5, 2, 3), (4, 2, 5))),
    ({}, ((3, 4), (5, 4), (4, 4))),
])
def test_multihead_attention_refuses_keys_and_values_that_disagree(options, shapes):
    def attempt(lib):
        lib.nn.MultiheadAttention(4, 2, **options)(*(lib.zeros(s) for s in shapes))
    got = _error_of(lambda: attempt(microtensor))
    assert got is not None and got[0] is AssertionError
    if _torch is not None:
        assert got == _error_of(lambda: attempt(_torch))


_LOSSES = ["cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits"]


@pytest.mark.parametrize("name", _LOSSES)
def test_functional_losses_take_pytorchs_parameters(name):
    """Older programs pass size_average=/reduce= (PyTorch still takes them, warning);
    newer ones weight= to mse_loss and l1_loss."""
    import inspect
    params = list(inspect.signature(getattr(microtensor.nn.functional, name)).parameters)
    if _torch is not None:
        assert params == list(inspect.signature(getattr(_torch.nn.functional, name))
                              .parameters)
    assert {"size_average", "reduce", "reduction"} <= set(params)


def _legacy_losses(lib):
    F = lib.nn.functional
    x = lib.tensor(np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32))
    y = lib.tensor(np.linspace(0, 1, 6).reshape(2, 3).astype(np.float32))
    w = lib.tensor(np.linspace(0.5, 1.5, 6).reshape(2, 3).astype(np.float32))
    labels = lib.tensor([0, 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = [F.cross_entropy(x, labels, size_average=False),
                  F.nll_loss(F.log_softmax(x, 1), labels, reduce=False),
                  F.mse_loss(x, y, size_average=False), F.mse_loss(x, y, weight=w),
                  F.mse_loss(x, y, weight=w, reduction="none"),
                  F.l1_loss(x, y, weight=w, reduction="sum"),
                  F.binary_cross_entropy(y.clamp(0.1, 0.9), y, reduce=False),
                  F.binary_cross_entropy_with_logits(x, y, size_average=True)]
    errors = [_error_of(lambda: F.mse_loss(x, y, weight=lib.ones(3))),
              _error_of(lambda: F.l1_loss(x, y, weight=w, reduction="bad"))]
    return [_numpy(v) for v in values], [str(w.message) for w in caught], errors


def test_legacy_reduction_flags_and_weighted_pointwise_losses():
    values, notes, errors = _legacy_losses(microtensor)
    assert len(notes) == 5 and all("size_average and reduce args will be deprecated" in n
                                   for n in notes)
    assert all(e is not None and e[0] is ValueError for e in errors)
    if _torch is not None:
        ref_values, ref_notes, ref_errors = _legacy_losses(_torch)
        _assert_same(values, ref_values, "losses", 1e-6, 1e-7)
        assert notes == ref_notes and errors == ref_errors
