"""The dropout modules besides ``Dropout`` (in ``nn.modules``): channel-wise
``Dropout1d/2d/3d`` and ``AlphaDropout`` / ``FeatureAlphaDropout``, PyTorch's modules over
``nn.functional`` (active in training mode only)."""
from microtensor.nn import functional as F
from microtensor.nn.modules import _DropoutNd

__all__ = ["Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]


class Dropout1d(_DropoutNd):
    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(_DropoutNd):
    def forward(self, input):
        return F.dropout3d(input, self.p, self.training, self.inplace)


class AlphaDropout(_DropoutNd):
    # PyTorch's module passes no ``inplace`` on (it only prints it)
    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(_DropoutNd):
    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training)
