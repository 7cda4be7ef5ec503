"""``MultiheadAttention`` and the transformer built on it (``TransformerEncoderLayer``,
``TransformerEncoder``, ``TransformerDecoderLayer``, ``TransformerDecoder``,
``Transformer``), with PyTorch's submodules and parameters (names, shapes,
initialisation), so a PyTorch ``state_dict`` loads, and the math of
``F.multi_head_attention_forward``; also ``torch.nn.attention``'s ``SDPBackend`` and
``sdpa_kernel``."""
import contextlib
import copy
import enum
import math
import warnings

from microtensor._C.tensor import bool_
from microtensor.autograd.grad_mode import is_grad_enabled
from microtensor.backends import mha
from microtensor.backends.flags import SDP_KERNELS, set_sdp
from microtensor.nn import functional as F
from microtensor.nn import init
from microtensor.nn.containers import ModuleList
from microtensor.nn.modules import Dropout, Linear, Module
from microtensor.nn.norm import LayerNorm
from microtensor.nn.parameter import Parameter
from microtensor.ops.factory import empty, full
from microtensor.ops.shape import cat

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
           "TransformerDecoderLayer", "TransformerDecoder", "Transformer"]


class NonDynamicallyQuantizableLinear(Linear):
    """PyTorch's name for the output projection (it shows in the repr)."""


def _additive(mask, dtype):
    """A mask as PyTorch's MultiheadAttention takes it: bool (True: not attended) turned
    into -inf/0, float kept (added to the scores)."""
    if mask is None or mask.dtype is not bool_:
        return mask
    return mask.new_zeros(tuple(mask.shape), dtype=dtype).masked_fill(mask, -math.inf)


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads):
    """PyTorch's checks of the inputs' ranks (``_mha_shape_check``); True when batched."""
    if query.dim() not in (2, 3):
        raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received "
                             f"{query.dim()}-D query tensor")
    batched = query.dim() == 3
    kind, rank = ("batched (3-D)", 3) if batched else ("unbatched (2-D)", 2)
    if key.dim() != rank or value.dim() != rank:
        raise AssertionError(f"For {kind} `query`, expected `key` and `value` to be {rank}-D "
                             f"but found {key.dim()}-D and {value.dim()}-D tensors "
                             f"respectively")
    if key_padding_mask is not None and key_padding_mask.dim() != rank - 1:
        raise AssertionError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or "
                             f"{rank - 1}-D but found {key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 3):
            raise AssertionError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D "
                                 f"or 3-D but found {attn_mask.dim()}-D tensor instead")
        expected = (num_heads, query.shape[0], key.shape[0])
        if not batched and attn_mask.dim() == 3 and tuple(attn_mask.shape) != expected:
            raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got "
                                 f"{attn_mask.shape}")
    return batched


def _check_mask_dtype(mask, name):
    if mask is not None and not (mask.dtype is bool_ or mask.is_floating_point()):
        raise AssertionError(f"only bool and floating types of {name} are supported")


class MultiheadAttention(Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        factory = {"dtype": dtype, "device": device}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **factory))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        **factory)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, **factory))
            self.bias_v = Parameter(empty(1, 1, embed_dim, **factory))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _projections(self):
        if self._qkv_same_embed_dim:
            weights = self.in_proj_weight.chunk(3)
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        biases = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        return weights, biases

    def _check_key_value(self, key, value, batched):
        """PyTorch's check that key and value agree (shown sequence-first, as PyTorch
        shows them)."""
        k, v = tuple(key.shape), tuple(value.shape)
        if not batched:
            k, v = (k[0], 1) + k[1:], (v[0], 1) + v[1:]
        elif self.batch_first:
            k, v = (k[1], k[0]) + k[2:], (v[1], v[0]) + v[2:]
        size = type(key.shape)
        if self._qkv_same_embed_dim and k != v:
            raise AssertionError(f"key shape {size(k)} does not match value shape {size(v)}")
        if not self._qkv_same_embed_dim and k[:2] != v[:2]:
            raise AssertionError(f"key's sequence and batch dims {size(k[:2])} do not match "
                                 f"value's {size(v[:2])}")

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        batched = _check_shapes(query, key, value, key_padding_mask, attn_mask,
                                self.num_heads)
        _check_mask_dtype(key_padding_mask, "key_padding_mask")
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use "
                               "the Transformer module method `generate_square_subsequent_mask`"
                               " to create this mask.")
        _check_mask_dtype(attn_mask, "attn_mask")
        self._check_key_value(key, value, batched)
        # one packed in-projection for self-attention, as PyTorch's ``in_projection_packed``
        packed = query is key is value and self._qkv_same_embed_dim
        # the math runs batch-first, (N, L, E): each sample's rows are then contiguous
        # blocks, so that under vmap a projection is one product per sample
        if batched and not self.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        if not batched:
            query, key, value = (x.unsqueeze(0) for x in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        n, length, embed = query.shape
        source = key.shape[1]
        heads, head_dim = self.num_heads, self.head_dim
        if embed != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but "
                                 f"got {embed}")
        if packed:
            q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, -1)
        else:
            (wq, wk, wv), (bq, bk, bv) = self._projections()
            q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        # add_bias_kv appends one learnt key and value, add_zero_attn one of zeros in every
        # head; the masks let the queries attend to them
        extra = (self.bias_k is not None) + bool(self.add_zero_attn)
        if self.bias_k is not None:
            k = cat([k, self.bias_k.expand(n, 1, embed)], 1)
            v = cat([v, self.bias_v.expand(n, 1, embed)], 1)
        # heads: (N, H, L, head_dim), views of the projections
        q = q.reshape(n, length, heads, head_dim).transpose(1, 2)
        k = k.reshape(n, k.shape[1], heads, head_dim).transpose(1, 2)
        v = v.reshape(n, v.shape[1], heads, head_dim).transpose(1, 2)
        if self.add_zero_attn:
            k = cat([k, k.new_zeros((n, heads, 1, head_dim))], 2)
            v = cat([v, v.new_zeros((n, heads, 1, head_dim))], 2)
        mask = _additive(attn_mask, q.dtype)
        if mask is not None and mask.dim() == 3:
            expected = (n * heads, length, source)
            if tuple(mask.shape) != expected:
                raise RuntimeError(f"The shape of the 3D attn_mask is {mask.shape}, "
                                   f"but should be {expected}.")
            mask = mask.reshape(n, heads, length, source)
        elif mask is not None and tuple(mask.shape) != (length, source):
            raise RuntimeError(f"The shape of the 2D attn_mask is {mask.shape}, but "
                               f"should be {(length, source)}.")
        if key_padding_mask is not None:
            for dim, size in enumerate((n, source)):
                if key_padding_mask.shape[dim] != size:
                    raise AssertionError(f"Expected key_padded_mask.shape[{dim}] to be {size}, "
                                         f"but got {key_padding_mask.shape[dim]}")
        padding = _additive(key_padding_mask, q.dtype)
        if extra and mask is not None:
            mask = F.pad(mask, (0, extra))
        if padding is not None:
            padding = F.pad(padding, (0, extra)).reshape(n, 1, 1, source + extra)
            mask = padding if mask is None else mask + padding
        scores = (q * (1.0 / math.sqrt(head_dim))).matmul(k.mT)
        if mask is not None:
            scores = scores + mask
        if mask is not None and not need_weights:
            # PyTorch computes this case with its fused attention kernel, which gives a
            # query whose every key is masked zero weights (and zero gradients) where the
            # softmax of a row of -inf is NaN
            blocked = (mask == -math.inf).all(-1, keepdim=True)
            weights = scores.masked_fill(blocked, 0.0).softmax(-1).masked_fill(blocked, 0.0)
        else:
            weights = scores.softmax(-1)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, self.dropout)
        out = self.out_proj(weights.matmul(v).transpose(1, 2).reshape(n, length, embed))
        if batched and not self.batch_first:
            out = out.transpose(0, 1)
        elif not batched:
            out = out.squeeze(0)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        return out, weights if batched else weights.squeeze(0)


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation_fn(activation):
    """A transformer layer's ``activation``: a callable as given, or one of PyTorch's
    names for one."""
    if not isinstance(activation, str):
        return activation
    if activation not in _ACTIVATIONS:
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return _ACTIVATIONS[activation]


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual connection and
    LayerNorm (after each block, or before it with ``norm_first``), as PyTorch's."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation_fn(activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` in a row, then ``norm`` if given.

    PyTorch's inference path (``use_nested_tensor``: eval mode, no gradient to record, a
    left-aligned ``src_key_padding_mask`` and no ``mask``) packs the sequences into a
    nested tensor and unpacks the result padded with zeros: there the padded positions of
    the output (before ``norm``) are 0, which a port's pooling over every position sees.
    This encoder gives the same zeros in the same cases."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why_not = _why_not_nested(encoder_layer)
        if enable_nested_tensor and why_not:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False "
                          f"because {why_not}", UserWarning, stacklevel=2)
            self.use_nested_tensor = False

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        padded = self._nested_padding(src, mask, src_key_padding_mask)
        if padded is not None:
            x = x.masked_fill(padded.unsqueeze(-1), 0.0)
        return x if self.norm is None else self.norm(x)

    def _nested_padding(self, src, mask, key_padding_mask):
        """The padded positions (N, S) when PyTorch would take its nested-tensor path,
        else None."""
        first = self.layers[0]
        if (not mha.get_fastpath_enabled() or not self.use_nested_tensor or first.training or src.dim() != 3
                or key_padding_mask is None or mask is not None):
            return None
        if is_grad_enabled() and (src.requires_grad or
                                  any(p.requires_grad for p in first.parameters())):
            return None
        padded = key_padding_mask if key_padding_mask.dtype is bool_ \
            else key_padding_mask != 0
        # left-aligned: no valid position after a padded one
        if self.mask_check and (padded[:, :-1] & ~padded[:, 1:]).any().item():
            return None
        return padded


def _why_not_nested(layer):
    """Why PyTorch's encoder cannot take its nested-tensor path with ``layer`` (its
    message), or "" when it can."""
    from microtensor.nn.activation import GELU
    from microtensor.nn.modules import ReLU
    attn = layer.self_attn if isinstance(layer, TransformerEncoderLayer) else None
    if attn is None:
        return "encoder_layer was not TransformerEncoderLayer"
    if layer.norm_first:
        return "encoder_layer.norm_first was True"
    if not attn.batch_first:
        return ("encoder_layer.self_attn.batch_first was not True(use batch_first for better "
                "inference performance)")
    if not attn._qkv_same_embed_dim:
        return "encoder_layer.self_attn._qkv_same_embed_dim was not True"
    if attn.in_proj_bias is None:
        return "encoder_layer.self_attn was passed bias=False"
    if not (layer.activation in (F.relu, F.gelu) or isinstance(layer.activation, (ReLU, GELU))):
        return "encoder_layer.activation_relu_or_gelu was not True"
    if layer.norm1.eps != layer.norm2.eps:
        return "encoder_layer.norm1.eps was not equal to encoder_layer.norm2.eps"
    if attn.num_heads % 2 == 1:
        return "encoder_layer.self_attn.num_heads is odd"
    return ""


class TransformerDecoderLayer(Module):
    """Self-attention over the target, attention from the target to ``memory`` (the
    encoder's output), then a feed-forward block, each with a residual connection and
    LayerNorm (after each block, or before it with ``norm_first``), as PyTorch's."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, **factory)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias, **factory)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation_fn(activation)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask,
                                   tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                           memory_is_causal))
        return self.norm3(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` in a row, then ``norm`` if given."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        # the masks are always applied, so whether ``tgt_mask`` is causal (PyTorch detects
        # it when ``tgt_is_causal`` is None, to pick a kernel) changes nothing here
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """An encoder (``TransformerEncoder`` of ``num_encoder_layers`` layers and a final
    LayerNorm) and a decoder (likewise), or the ``custom_encoder``/``custom_decoder``
    given; every parameter of more than one dimension starts Xavier-uniform, as PyTorch's."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation=F.relu, custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False,
                 norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **factory), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **factory), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batch_dim = 0 if self.batch_first else 1
        if src.dim() == 3 and src.size(batch_dim) != tgt.size(batch_dim):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """A causal mask: -inf above the diagonal (a later position), 0 elsewhere."""
        return full((sz, sz), -math.inf, dtype=dtype, device=device).triu(diagonal=1)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)


# --------------------------------------------------------------------------- sdpa_kernel
# ``torch.nn.attention``'s kernel choice for ``F.scaled_dot_product_attention``.  Kept
# out of ``__all__``: PyTorch has these in ``torch.nn.attention`` only, not ``torch.nn``.
# microtensor has only the math kernel, which it always runs: the choice is recorded in
# the ``torch.backends.cuda`` flags and changes no result.

class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_SDP_FLAGS = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
              SDPBackend.EFFICIENT_ATTENTION: "mem_efficient",
              SDPBackend.CUDNN_ATTENTION: "cudnn"}


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority=False):
    """Enables only ``backends`` (one ``SDPBackend`` or a list) inside a ``with`` block,
    restoring the previous choice after it."""
    if not isinstance(backends, (list, SDPBackend)):
        raise AssertionError(f"Backend must be an instance of SDPBackend or a list of "
                             f"SDPBackend instances, got {type(backends).__name__}")
    chosen = {backends} if isinstance(backends, SDPBackend) else set(backends)
    previous = dict(SDP_KERNELS)
    try:
        for backend, kernel in _SDP_FLAGS.items():
            set_sdp(kernel, backend in chosen)
        yield {}
    finally:
        SDP_KERNELS.update(previous)
