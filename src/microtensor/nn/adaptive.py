"""``AdaptiveLogSoftmaxWithLoss``: Grave et al.'s adaptive softmax for large vocabularies,
as PyTorch's (parameters, output, errors).  Frequent classes are scored by the ``head``
with one extra logit per tail cluster; a rarer class's log-probability is its cluster's
head log-probability plus its log-probability within the cluster, from a low-rank
projection.  Written in other ops, so its gradient (and vmap) come from theirs."""
from collections import namedtuple

from microtensor.nn import functional as F
from microtensor.nn.containers import ModuleList
from microtensor.nn.modules import Linear, Module, Sequential
from microtensor.ops.shape import cat

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False,
                 device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers "
                             "sorted in an increasing order, where each value is between 1 "
                             "and n_classes-1")
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **factory)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hidden, bias=False, **factory),
                                        Linear(hidden, size, bias=False, **factory)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_, target_):
        if target_.dim() == 1:
            if input_.size(0) != target_.size(0):
                raise RuntimeError("Input and target should have the same size in the batch "
                                   "dimension.")
            if input_.dim() != 2:
                raise RuntimeError(f"1D target tensor expects 2D input tensors, but found "
                                   f"inputs with size {input_.size()}")
        elif target_.dim() == 0:
            if input_.dim() != 1:
                raise RuntimeError(f"0D target tensor expects 1D input tensors, but found "
                                   f"inputs with size {input_.size()}")
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.dim() > 0
        input = input_ if batched else input_.unsqueeze(0)
        target = target_ if batched else target_.unsqueeze(0)
        if ((target < 0) | (target >= self.n_classes)).any().item():
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but "
                               f"values in range [{target.min().item()}, "
                               f"{target.max().item()}] were found. ")
        # each row's head column: its class in the shortlist, else its cluster's
        head_column = target
        cluster_terms = []
        bounds = self.cutoffs
        for i in range(self.n_clusters):
            in_cluster = (target >= bounds[i]) & (target < bounds[i + 1])
            rows = in_cluster.nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            head_column = head_column.masked_fill(in_cluster, self.shortlist_size + i)
            logprob = F.log_softmax(self.tail[i](input.index_select(0, rows)), dim=1)
            local = logprob.gather(1, (target.index_select(0, rows) - bounds[i]).unsqueeze(1))
            cluster_terms.append((rows, local.squeeze(1)))
        head_logprob = F.log_softmax(self.head(input), dim=1)
        output = head_logprob.gather(1, head_column.unsqueeze(1)).squeeze(1)
        for rows, local in cluster_terms:
            output = output.index_add(0, rows, local)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _get_full_log_prob(self, input, head_output):
        head_logprob = F.log_softmax(head_output, dim=1)
        pieces = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            pieces.append(cluster_logprob +
                          head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(pieces, 1)

    def log_prob(self, input):
        """Log-probabilities of all ``n_classes`` classes, (N, n_classes)."""
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most probable class of each row, as ``log_prob(input).argmax(1)`` but
        scoring the tail clusters only for rows whose head picks a cluster."""
        head_output = self.head(input)
        output = head_output.argmax(dim=1)
        not_in_shortlist = output >= self.shortlist_size
        if not not_in_shortlist.any().item():
            return output
        if not_in_shortlist.all().item():
            return self._get_full_log_prob(input, head_output).argmax(dim=1)
        log_prob = self._get_full_log_prob(input[not_in_shortlist],
                                           head_output[not_in_shortlist])
        output[not_in_shortlist] = log_prob.argmax(dim=1)
        return output
