"""Vision and generative PyTorch programs, written as in PyTorch's tutorials and examples,
run twice: on PyTorch and on microtensor, the same code with only the library differing.

Each program is a function of the library (``def program(torch, rec)``): it builds its
model, copies the initial weights through ``rec.sync`` (PyTorch's state_dict round-trips
through NumPy into microtensor's), feeds inputs drawn from one NumPy generator, trains a few
steps and records (``rec(name, value)``) outputs, losses, every parameter's ``.grad``, the
parameters after each optimizer step, eval-mode outputs and the state_dict's keys, shapes
and dtypes.  The two recordings must agree to float32 tolerances.
"""
import io

import numpy as np
import pytest

import microtensor

try:
    import torch as _torch
except ImportError:     # pragma: no cover
    _torch = None

needs_torch = pytest.mark.skipif(_torch is None, reason="PyTorch is not installed: the "
                                 "programs are compared against it")


@pytest.fixture(autouse=True, scope="module")
def _pytorch_on_one_thread():
    """PyTorch's thread pool slows these tiny programs down many times on a busy machine."""
    if _torch is None:
        yield
        return
    threads = _torch.get_num_threads()
    _torch.set_num_threads(1)
    yield
    _torch.set_num_threads(threads)


class Recorder:
    """Records a program's results as NumPy values; ``sync`` shares the initial weights."""

    def __init__(self, lib, weights):
        self.lib = lib
        self.weights = weights      # name -> {key: ndarray}, filled by the first run
        self.values = {}

    def __call__(self, name, value):
        assert name not in self.values, name
        self.values[name] = _numpy(value)

    def sync(self, name, model):
        """The first run publishes ``model``'s state_dict; later runs load it."""
        if name not in self.weights:
            self.weights[name] = {k: _numpy(v) for k, v in model.state_dict().items()}
        else:
            state = {k: self.lib.tensor(v) for k, v in self.weights[name].items()}
            model.load_state_dict(state)

    def grads(self, prefix, model):
        for name, p in model.named_parameters():
            self(f"{prefix}.grad.{name}", p.grad)

    def params(self, prefix, model):
        for name, p in model.named_parameters():
            self(f"{prefix}.{name}", p)

    def state(self, prefix, model):
        sd = model.state_dict()
        self(f"{prefix}.keys", list(sd))
        for key, value in sd.items():
            self(f"{prefix}.{key}", value)
            self(f"{prefix}.{key}.shape", tuple(value.shape))
            self(f"{prefix}.{key}.dtype", str(value.dtype).split(".")[-1])


def _numpy(value):
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy().copy()
    if isinstance(value, (list, tuple)):
        return type(value)(_numpy(v) for v in value)
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    if isinstance(value, float):
        return np.asarray(value)
    return value


def _assert_same(actual, expected, name, rtol, atol):
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), name
        assert actual.dtype == expected.dtype, (name, actual.dtype, expected.dtype)
        assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected), name
        for i, (a, e) in enumerate(zip(actual, expected)):
            _assert_same(a, e, f"{name}[{i}]", rtol, atol)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), name
        for key in expected:
            _assert_same(actual[key], expected[key], f"{name}[{key!r}]", rtol, atol)
    else:
        assert actual == expected, (name, actual, expected)


def _run_both(program, rtol=2e-4, atol=2e-5):
    weights = {}
    ref = Recorder(_torch, weights)
    program(_torch, ref, np.random.default_rng(0))
    got = Recorder(microtensor, weights)
    program(microtensor, got, np.random.default_rng(0))
    assert list(got.values) == list(ref.values)
    for name, expected in ref.values.items():
        _assert_same(got.values[name], expected, name, rtol, atol)
    return ref, got


def _input(torch, rng, *shape):
    return torch.tensor(rng.standard_normal(shape).astype(np.float32))


# -- MNIST-style CNN (pytorch/examples mnist/main.py, shrunk) ---------------------------

def mnist_cnn(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, 1)
            self.bn1 = nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(4, 6, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.dropout2 = nn.Dropout(0.5)
            self.fc1 = nn.Linear(6 * 4 * 4, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.conv2(x)
            x = F.relu(x)
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = self.dropout2(x)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    model = Net()
    rec.sync("mnist", model)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    data = _input(torch, rng, 8, 1, 12, 12)
    target = torch.tensor(rng.integers(0, 10, 8))
    model.train()
    # Dropout's masks are random; the comparison trains with them off (their own test
    # checks the train-mode masks).
    model.dropout1.eval()
    model.dropout2.eval()
    for step in range(3):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        rec(f"loss{step}", loss)
        rec.grads(f"step{step}", model)
        optimizer.step()
        scheduler.step()
        rec.params(f"after{step}", model)
        rec(f"lr{step}", scheduler.get_last_lr()[0])
    model.eval()
    with torch.no_grad():
        output = model(data)
        test_loss = F.nll_loss(output, target, reduction="sum").item()
        pred = output.argmax(dim=1, keepdim=True)
        correct = pred.eq(target.view_as(pred)).sum().item()
    rec("eval.output", output)
    rec("eval.loss", test_loss)
    rec("eval.correct", correct)
    rec.state("state", model)


@needs_torch
def test_mnist_cnn():
    _run_both(mnist_cnn)


def test_dropout_train_mode_masks_scale_and_backpropagate():
    x = microtensor.ones(64, 32, requires_grad=True)
    y = microtensor.nn.Dropout(0.25)(x)
    kept = y.detach() != 0
    assert 0.6 < kept.float().mean().item() < 0.9
    np.testing.assert_allclose(y.detach().numpy()[kept.numpy()], 1 / 0.75, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), kept.float().numpy() / 0.75, rtol=1e-6)


# -- ResNet basic blocks (torchvision's resnet.py, shrunk), channels_last ----------------

def resnet(torch, rec, rng):
    nn = torch.nn

    def conv3x3(in_planes, out_planes, stride=1):
        return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1,
                         bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = conv3x3(inplanes, planes, stride)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(planes, planes)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self, layers=(1, 1), num_classes=5):
            super().__init__()
            self.inplanes = 4
            self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(4, layers[0])
            self.layer2 = self._make_layer(8, layers[1], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def _make_layer(self, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(
                    nn.Conv2d(self.inplanes, planes, kernel_size=1, stride=stride,
                              bias=False),
                    nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer2(self.layer1(x))
            x = self.avgpool(x)
            x = torch.flatten(x, 1)
            return self.fc(x)

    model = ResNet()
    rec.sync("resnet", model)
    model = model.to(memory_format=torch.channels_last)
    rec("weight_channels_last",
        model.conv1.weight.is_contiguous(memory_format=torch.channels_last))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                                weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
    images = _input(torch, rng, 4, 3, 8, 8).to(memory_format=torch.channels_last)
    target = torch.tensor(rng.integers(0, 5, 4))
    model.train()
    for step in range(3):
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        rec(f"output{step}", output)
        rec(f"loss{step}", loss)
        rec.grads(f"step{step}", model)
        rec(f"grad_channels_last{step}",
            model.conv1.weight.grad.is_contiguous(memory_format=torch.channels_last))
        optimizer.step()
        scheduler.step()
        rec.params(f"after{step}", model)
    rec("lr", scheduler.get_last_lr())
    model.eval()
    with torch.no_grad():
        output = model(images)
        rec("eval.requires_grad", output.requires_grad)
    rec("eval.output", output)
    rec.state("state", model)
    rec("sgd.state", [optimizer.state_dict()["state"][i]["momentum_buffer"]
                      for i in range(3)])


@needs_torch
def test_resnet_channels_last():
    _run_both(resnet)


# -- VAE (pytorch/examples vae/main.py, shrunk) -------------------------------------------

def vae(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(36, 16)
            self.fc21 = nn.Linear(16, 4)
            self.fc22 = nn.Linear(16, 4)
            self.fc3 = nn.Linear(4, 16)
            self.fc4 = nn.Linear(16, 36)

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar, eps):
            std = torch.exp(0.5 * logvar)
            return mu + eps * std

        def decode(self, z):
            return self.fc4(F.relu(self.fc3(z)))      # logits

        def forward(self, x, eps):
            mu, logvar = self.encode(x.view(-1, 36))
            z = self.reparameterize(mu, logvar, eps)
            return self.decode(z), mu, logvar

    def loss_function(recon_logits, x, mu, logvar):
        bce = F.binary_cross_entropy_with_logits(recon_logits, x.view(-1, 36),
                                                 reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return bce, kld

    model = VAE()
    rec.sync("vae", model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.tensor(rng.uniform(size=(6, 1, 6, 6)).astype(np.float32))
    model.train()
    for step in range(3):
        # the reparameterisation's noise, drawn outside so both libraries see the same
        eps = _input(torch, rng, 6, 4)
        optimizer.zero_grad()
        recon, mu, logvar = model(data, eps)
        bce, kld = loss_function(recon, data, mu, logvar)
        loss = bce + kld
        loss.backward()
        rec(f"bce{step}", bce)
        rec(f"kld{step}", kld)
        rec.grads(f"step{step}", model)
        optimizer.step()
        rec.params(f"after{step}", model)
    model.eval()
    with torch.no_grad():
        sample = torch.sigmoid(model.decode(_input(torch, rng, 3, 4)))
    rec("sample", sample.view(3, 1, 6, 6))
    state = optimizer.state_dict()
    rec("adam.step", [float(s["step"]) for s in state["state"].values()])
    rec("adam.exp_avg_sq", [s["exp_avg_sq"] for s in state["state"].values()])
    # microtensor's optimizers have no foreach/fused/capturable/differentiable variants,
    # so their groups lack those four keys
    rec("adam.groups", [{k: g[k] for k in ("lr", "betas", "eps", "weight_decay", "amsgrad",
                                           "maximize", "decoupled_weight_decay", "params")}
                        for g in state["param_groups"]])


@needs_torch
def test_vae():
    _run_both(vae)


# -- DCGAN (pytorch/examples dcgan/main.py, shrunk) ---------------------------------------

def dcgan(torch, rec, rng):
    nn = torch.nn
    nz, ngf, ndf = 4, 6, 6

    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            torch.nn.init.normal_(m.weight, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            torch.nn.init.normal_(m.weight, 1.0, 0.02)
            torch.nn.init.zeros_(m.bias)

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),    # 4x4
                nn.BatchNorm2d(ngf * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),   # 8x8
                nn.BatchNorm2d(ngf),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False),         # 16x16
                nn.Tanh())

        def forward(self, input):
            return self.main(input)

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.Conv2d(1, ndf, 4, 2, 1, bias=False),                  # 8x8
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),            # 4x4
                nn.BatchNorm2d(ndf * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
                nn.Sigmoid())

        def forward(self, input):
            return self.main(input).view(-1, 1).squeeze(1)

    netG = Generator()
    netG.apply(weights_init)
    netD = Discriminator()
    netD.apply(weights_init)
    rec.sync("G", netG)
    rec.sync("D", netD)
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
    fixed_noise = _input(torch, rng, 3, nz, 1, 1)
    for i in range(3):
        real = torch.tensor(rng.uniform(-1, 1, size=(4, 1, 16, 16)).astype(np.float32))
        noise = _input(torch, rng, 4, nz, 1, 1)
        # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        batch_size = real.size(0)
        label = torch.full((batch_size,), real_label, dtype=real.dtype)
        output = netD(real)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        rec.grads(f"D{i}", netD)
        rec(f"G{i}.grad_after_D", [p.grad for p in netG.parameters()])
        optimizerD.step()
        # (2) Update G: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        rec.grads(f"G{i}", netG)
        optimizerG.step()
        rec(f"losses{i}", [errD, errG, D_x, D_G_z1, D_G_z2])
        rec.params(f"G{i}.after", netG)
        rec.params(f"D{i}.after", netD)
    netG.eval()
    with torch.no_grad():
        rec("fixed", netG(fixed_noise).detach())
    rec.state("G.state", netG)
    rec.state("D.state", netD)


@needs_torch
def test_dcgan():
    _run_both(dcgan)


# -- U-Net with GroupNorm and both kinds of bilinear upsampling ---------------------------

def unet(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional

    class DoubleConv(nn.Sequential):
        def __init__(self, cin, cout):
            super().__init__(
                nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(2, cout),
                nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.GroupNorm(2, cout),
                nn.ReLU(inplace=True))

    class Up(nn.Module):
        def __init__(self, cin, cout, align_corners):
            super().__init__()
            self.align_corners = align_corners
            if not align_corners:
                self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.conv = DoubleConv(cin, cout)

        def forward(self, x1, x2):
            if self.align_corners:
                x1 = F.interpolate(x1, size=x2.shape[-2:], mode="bilinear",
                                   align_corners=True)
            else:
                x1 = self.up(x1)
            diffY = x2.size()[2] - x1.size()[2]
            diffX = x2.size()[3] - x1.size()[3]
            x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
            return self.conv(torch.cat([x2, x1], dim=1))

    class UNet(nn.Module):
        def __init__(self, n_channels=2, n_classes=3):
            super().__init__()
            self.inc = DoubleConv(n_channels, 4)
            self.down1 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(4, 8))
            self.down2 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(8, 8))
            self.up1 = Up(16, 4, align_corners=True)
            self.up2 = Up(8, 4, align_corners=False)
            self.outc = nn.Conv2d(4, n_classes, kernel_size=1)

        def forward(self, x):
            x1 = self.inc(x)
            x2 = self.down1(x1)
            x3 = self.down2(x2)
            x = self.up1(x3, x2)
            x = self.up2(x, x1)
            return self.outc(x)

    model = UNet()
    rec.sync("unet", model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-2, total_steps=5)
    images = _input(torch, rng, 2, 2, 10, 10)
    masks = torch.tensor(rng.integers(0, 3, (2, 10, 10)))
    for step in range(3):
        optimizer.zero_grad()
        logits = model(images)
        loss = F.cross_entropy(logits, masks) + 0.1 * (
            1 - F.softmax(logits, 1).gather(1, masks.unsqueeze(1)).mean())
        loss.backward()
        rec(f"logits{step}", logits)
        rec(f"loss{step}", loss)
        rec.grads(f"step{step}", model)
        optimizer.step()
        scheduler.step()
        rec.params(f"after{step}", model)
        rec(f"lr{step}", scheduler.get_last_lr())
    model.eval()
    with torch.inference_mode():
        pred = model(images).argmax(1)
    rec("pred", pred)
    # microtensor's inference_mode is no_grad: its results are not inference tensors
    rec("pred.requires_grad", pred.requires_grad)
    rec.state("state", model)
    rec("scheduler", {k: v for k, v in scheduler.state_dict().items()
                      if k != "_get_lr_called_within_step"})    # PyTorch's private flag


@needs_torch
def test_unet():
    _run_both(unet)


# -- ViT: patch embedding, cls token, nn.TransformerEncoder --------------------------------

def vit(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional

    class PatchEmbed(nn.Module):
        def __init__(self, img_size=8, patch_size=4, in_chans=3, embed_dim=8):
            super().__init__()
            self.num_patches = (img_size // patch_size) ** 2
            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size,
                                  stride=patch_size)

        def forward(self, x):
            return self.proj(x).flatten(2).transpose(1, 2)     # B, N, D

    class ViT(nn.Module):
        def __init__(self, embed_dim=8, depth=2, num_heads=2, num_classes=4):
            super().__init__()
            self.patch_embed = PatchEmbed(embed_dim=embed_dim)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
            self.pos_embed = nn.Parameter(
                torch.zeros(1, self.patch_embed.num_patches + 1, embed_dim))
            layer = nn.TransformerEncoderLayer(embed_dim, num_heads, dim_feedforward=16,
                                               dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(embed_dim),
                                                 enable_nested_tensor=False)
            self.head = nn.Linear(embed_dim, num_classes)
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            nn.init.trunc_normal_(self.cls_token, std=0.02)

        def forward(self, x):
            x = self.patch_embed(x)
            cls = self.cls_token.expand(x.shape[0], -1, -1)
            x = torch.cat((cls, x), dim=1) + self.pos_embed
            x = self.encoder(x)
            return self.head(x[:, 0])

    model = ViT()
    rec.sync("vit", model)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "token" not in n
             and "pos_embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and
                "token" not in n and "pos_embed" not in n)]
    rec("groups", [len(decay), len(no_decay)])
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=5e-3)
    warmup = 2
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    images = _input(torch, rng, 3, 3, 8, 8)
    labels = torch.tensor(rng.integers(0, 4, 3))
    model.train()
    for step in range(3):
        optimizer.zero_grad()
        logits = model(images)
        loss = criterion(logits, labels)
        loss.backward()
        rec(f"logits{step}", logits)
        rec(f"loss{step}", loss)
        rec.grads(f"step{step}", model)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        # The key projection's bias cannot change attention (softmax ignores a shift per
        # query), so its gradient is round-off, which Adam scales up to a full step: pin it
        # to zero in both libraries.
        with torch.no_grad():
            for layer in model.encoder.layers:
                layer.self_attn.in_proj_bias[8:16] = 0
        rec.params(f"after{step}", model)
        rec(f"lr{step}", scheduler.get_last_lr())
    model.eval()
    with torch.no_grad():
        rec("eval", F.softmax(model(images), dim=-1))
        # a key padding mask and a causal mask through the encoder, in eval mode
        tokens = torch.cat((model.cls_token.expand(3, -1, -1), model.patch_embed(images)), 1)
        pad = torch.tensor([[False] * 5, [False] * 4 + [True], [False] * 3 + [True] * 2])
        out = model.encoder(tokens, src_key_padding_mask=pad)
        rec("eval.padded", out[~pad])
        causal = nn.Transformer.generate_square_subsequent_mask(5)
        rec("causal", causal)
        rec("eval.causal", model.encoder(tokens, mask=causal, is_causal=True))
    rec.state("state", model)


@needs_torch
def test_vit():
    _run_both(vit)


# -- MobileNetV3-style inverted residual: depthwise conv, ReLU6, Hardswish, SE ------------

def mobilenet(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional

    class SqueezeExcitation(nn.Module):
        def __init__(self, channels, squeeze):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(channels, squeeze, 1)
            self.fc2 = nn.Conv2d(squeeze, channels, 1)

        def forward(self, x):
            scale = F.hardsigmoid(self.fc2(F.relu(self.fc1(self.avgpool(x)))))
            return scale * x

    class InvertedResidual(nn.Module):
        def __init__(self, cin, hidden, cout, stride):
            super().__init__()
            self.use_res = stride == 1 and cin == cout
            self.block = nn.Sequential(
                nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(True),
                nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                nn.BatchNorm2d(hidden), nn.Hardswish(inplace=True),
                SqueezeExcitation(hidden, 4),
                nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.block(x)
            return x + out if self.use_res else out

    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, 2, 1, bias=False), nn.BatchNorm2d(4, momentum=0.01, eps=1e-3),
        nn.Hardswish(),
        InvertedResidual(4, 8, 4, 1), InvertedResidual(4, 12, 6, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(6, 3))
    rec.sync("mobilenet", model)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9, eps=0.0316,
                                    momentum=0.9, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    images = _input(torch, rng, 4, 3, 12, 12)
    labels = torch.tensor(rng.integers(0, 3, 4))
    model.train()
    model[7].eval()        # dropout off: its masks are random
    for step in range(3):
        optimizer.zero_grad()
        out = model(images)
        loss = F.cross_entropy(out, labels)
        loss.backward()
        rec(f"loss{step}", loss)
        rec.grads(f"step{step}", model)
        optimizer.step()
        scheduler.step()
        rec.params(f"after{step}", model)
    model.eval()
    with torch.no_grad():
        rec("eval", model(images))
        rec("eval.channels_last", model.to(memory_format=torch.channels_last)(
            images.to(memory_format=torch.channels_last)))
    rec.state("state", model)


@needs_torch
def test_mobilenet():
    _run_both(mobilenet)




# -- WGAN-GP: a gradient penalty through autograd.grad(create_graph=True) ------------------

def train_wgan_gp(torch, rec, generator, critic, betas, real, noise, alpha, steps=2):
    """WGAN-GP as its paper's algorithm: two critic steps on a gradient penalty taken
    through ``autograd.grad(create_graph=True)``, then a generator step; ``real``,
    ``noise`` and ``alpha`` draw a batch each call.  Shared by the side-by-side files."""
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=betas)
    opt_d = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=betas)

    def gradient_penalty(real, fake, alpha):
        interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        scores = critic(interpolates)
        gradients = torch.autograd.grad(outputs=scores, inputs=interpolates,
                                        grad_outputs=torch.ones_like(scores),
                                        create_graph=True, retain_graph=True)[0]
        gradients = gradients.view(gradients.size(0), -1)
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

    for step in range(steps):
        for critic_step in range(2):            # n_critic
            batch, z, mix = real(), noise(), alpha()
            opt_d.zero_grad()
            fake = generator(z).detach()
            gp = gradient_penalty(batch, fake, mix)
            loss_d = critic(fake).mean() - critic(batch).mean() + 10 * gp
            loss_d.backward()
            rec(f"s{step}.c{critic_step}.gp", gp)
            rec(f"s{step}.c{critic_step}.loss_d", loss_d)
            rec.grads(f"s{step}.c{critic_step}.D", critic)
            opt_d.step()
        opt_g.zero_grad()
        loss_g = -critic(generator(noise())).mean()
        loss_g.backward()
        rec(f"s{step}.loss_g", loss_g)
        rec.grads(f"s{step}.G", generator)
        opt_g.step()
        rec.params(f"s{step}.G.after", generator)
        rec.params(f"s{step}.D.after", critic)
    rec("opt_d.state", opt_d.state_dict()["state"])


def wgan_gp(torch, rec, rng):
    nn = torch.nn
    generator = nn.Sequential(nn.Linear(3, 12), nn.ReLU(), nn.Unflatten(1, (3, 2, 2)),
                              nn.ConvTranspose2d(3, 1, 4, 2, 1), nn.Tanh())
    critic = nn.Sequential(nn.Conv2d(1, 4, 3, 2, 1), nn.LeakyReLU(0.2),
                           nn.InstanceNorm2d(4, affine=True), nn.Conv2d(4, 4, 3, 1, 1),
                           nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(16, 1))
    rec.sync("wgan.G", generator)
    rec.sync("wgan.D", critic)
    train_wgan_gp(torch, rec, generator, critic, (0.0, 0.9),
                  lambda: torch.tensor(rng.uniform(-1, 1, (4, 1, 4, 4)).astype(np.float32)),
                  lambda: _input(torch, rng, 4, 3),
                  lambda: torch.tensor(rng.uniform(size=(4, 1, 1, 1)).astype(np.float32)))


@needs_torch
def test_wgan_gp():
    _run_both(wgan_gp)


# -- data pipeline, hooks, clipping, freezing, checkpoint and resume ----------------------

def pipeline(torch, rec, rng):
    nn, F = torch.nn, torch.nn.functional
    data = torch.utils.data     # ``from torch.utils.data import ...`` would import PyTorch
    DataLoader, Dataset, Subset = data.DataLoader, data.Dataset, data.Subset
    TensorDataset, random_split = data.TensorDataset, data.random_split

    class Normalize:
        def __init__(self, mean, std):
            self.mean = torch.tensor(mean).view(-1, 1, 1)
            self.std = torch.tensor(std).view(-1, 1, 1)

        def __call__(self, x):
            return (x - self.mean) / self.std

    class RandomHorizontalFlip:
        def __init__(self, p=0.5):
            self.p = p

        def __call__(self, x):
            return torch.flip(x, dims=[-1]) if torch.rand(1).item() < self.p else x

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

        def __call__(self, x):
            for t in self.transforms:
                x = t(x)
            return x

    class Transformed(Dataset):
        def __init__(self, subset, transform):
            self.subset, self.transform = subset, transform

        def __len__(self):
            return len(self.subset)

        def __getitem__(self, i):
            x, y = self.subset[i]
            return self.transform(x), y

    images = torch.tensor(rng.uniform(size=(20, 2, 6, 6)).astype(np.float32))
    labels = torch.tensor(rng.integers(0, 3, 20))
    dataset = TensorDataset(images, labels)
    train_split, val_split = random_split(dataset, [0.75, 0.25],
                                          generator=torch.Generator().manual_seed(42))
    rec("split", [len(train_split), len(val_split)])
    # shuffling draws from each library's own generator: the compared run keeps the order
    transform = Compose([RandomHorizontalFlip(p=1.0), Normalize([0.5, 0.4], [0.2, 0.3])])
    train_set = Transformed(Subset(dataset, range(15)), transform)
    loader = DataLoader(train_set, batch_size=4, shuffle=False)
    rec("batches", len(loader))

    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveMaxPool2d(2), nn.Flatten(), nn.Linear(16, 3))

    def init_weights(m):
        if isinstance(m, nn.Conv2d):
            nn.init.dirac_(m.weight) if m.in_channels == m.out_channels else \
                nn.init.constant_(m.weight, 0.05)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.eye_(m.weight)
            nn.init.constant_(m.bias, 0.1)

    rec("apply_returns_model", model.apply(init_weights) is model)
    rec.state("init", model)
    rec.sync("pipeline", model)
    rec("convs", [name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)])
    rec("modules", [name for name, _ in model.named_modules()])
    rec("children", [type(m).__name__ for m in model.children()])

    # freeze the first conv: the optimizer only sees what still requires grad
    for p in model[0].parameters():
        p.requires_grad_(False)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    rec("trainable", trainable)
    optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()),
                                lr=0.05, momentum=0.9, dampening=0.1)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 5],
                                                     gamma=0.5)

    seen = {}

    def forward_hook(module, inputs, output):
        seen["relu_out"] = output.detach().clone()

    def pre_hook(module, args):
        return (args[0] * 2,)           # a forward pre-hook may replace the input

    def backward_hook(module, grad_input, grad_output):
        seen["grad_in"] = grad_input[0].detach().clone()
        seen["grad_out"] = grad_output[0].detach().clone()

    handles = [model[2].register_forward_hook(forward_hook),
               model[7].register_forward_pre_hook(pre_hook),
               model[3].register_full_backward_hook(backward_hook)]

    def train_epoch(model, optimizer, scheduler, epoch, rec):
        model.train()
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
            rec(f"e{epoch}.b{i}.loss", loss)
            rec(f"e{epoch}.b{i}.total_norm", total)
            rec.grads(f"e{epoch}.b{i}", model)
            optimizer.step()
            scheduler.step()
        rec.params(f"e{epoch}.after", model)

    train_epoch(model, optimizer, scheduler, 0, rec)
    for key in ("relu_out", "grad_in", "grad_out"):
        rec(f"hook.{key}", seen[key])
    for handle in handles:
        handle.remove()
    seen.clear()

    buffer = io.BytesIO()
    torch.save({"epoch": 1, "model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict(),
                "scheduler_state_dict": scheduler.state_dict()}, buffer)
    train_epoch(model, optimizer, scheduler, 1, rec)
    rec("hooks_removed", not seen)

    # resume from the checkpoint into fresh objects: the same second epoch
    buffer.seek(0)
    checkpoint = torch.load(buffer)
    resumed = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                            nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                            nn.AdaptiveMaxPool2d(2), nn.Flatten(), nn.Linear(16, 3))
    resumed.load_state_dict(checkpoint["model_state_dict"])
    for p in resumed[0].parameters():
        p.requires_grad_(False)
    opt2 = torch.optim.SGD([p for p in resumed.parameters() if p.requires_grad], lr=0.05,
                           momentum=0.9, dampening=0.1)
    opt2.load_state_dict(checkpoint["optimizer_state_dict"])
    sched2 = torch.optim.lr_scheduler.MultiStepLR(opt2, milestones=[2, 5], gamma=0.5)
    sched2.load_state_dict(checkpoint["scheduler_state_dict"])
    rec("checkpoint.epoch", checkpoint["epoch"])
    train_epoch(resumed, opt2, sched2, "resumed", rec)
    rec("resume_matches", all(torch.equal(a, b) for a, b in
                              zip(model.parameters(), resumed.parameters())))

    model.eval()
    with torch.inference_mode():
        out = model(images[:4])
    rec("inference", out)
    rec("inference.requires_grad", out.requires_grad)
    rec("inference.grad_enabled_after", torch.is_grad_enabled())


@needs_torch
def test_pipeline():
    _run_both(pipeline)



def _shuffled_epochs(seed, epochs=2):
    data = microtensor.utils.data
    dataset = data.TensorDataset(microtensor.arange(10), microtensor.arange(10) * 2)
    loader = data.DataLoader(dataset, batch_size=3, shuffle=True,
                             generator=microtensor.Generator().manual_seed(seed))
    return [[(x.tolist(), y.tolist()) for x, y in loader] for _ in range(epochs)]


def test_seeded_shuffle_is_reproducible_and_a_permutation_each_epoch():
    first, again = _shuffled_epochs(0), _shuffled_epochs(0)
    assert first == again
    assert first[0] != first[1]                   # a fresh order each epoch
    for epoch in first:
        assert [len(x) for x, _ in epoch] == [3, 3, 3, 1]
        xs = [v for x, _ in epoch for v in x]
        assert sorted(xs) == list(range(10))
        assert all(y == [2 * v for v in x] for x, y in epoch)
    assert _shuffled_epochs(1) != first


def test_seeded_random_split_is_reproducible_and_disjoint():
    data = microtensor.utils.data
    dataset = data.TensorDataset(microtensor.arange(10))

    def split(seed):
        parts = data.random_split(dataset, [0.7, 0.3],
                                  generator=microtensor.Generator().manual_seed(seed))
        return [list(p.indices) for p in parts]

    a, b = split(42)
    assert (len(a), len(b)) == (7, 3) and sorted(a + b) == list(range(10))
    assert split(42) == [a, b]


def test_manual_seed_makes_init_and_dropout_reproducible():
    def run():
        microtensor.manual_seed(123)
        model = microtensor.nn.Sequential(microtensor.nn.Conv2d(2, 3, 3),
                                          microtensor.nn.Dropout2d(0.5),
                                          microtensor.nn.Flatten(), microtensor.nn.Dropout(0.3))
        model.apply(lambda m: microtensor.nn.init.kaiming_uniform_(m.weight, a=0.1)
                    if isinstance(m, microtensor.nn.Conv2d) else None)
        out = model(microtensor.randn(2, 2, 5, 5))
        return [p.detach().numpy() for p in model.parameters()] + [out.detach().numpy()]

    for a, b in zip(run(), run()):
        np.testing.assert_array_equal(a, b)


# -- regression tests for what the programs met ------------------------------------------

_KEYWORD_SIZE_CALLS = [
    ("flip", lambda lib, x: lib.flip(x, dims=[1])),
    ("Tensor.flip", lambda lib, x: x.flip(dims=(0, 1))),
    ("permute", lambda lib, x: lib.permute(x, dims=[1, 0])),
    ("Tensor.permute", lambda lib, x: x.permute(dims=(1, 0))),
    ("Tensor.repeat", lambda lib, x: x.repeat(repeats=(1, 2))),
    ("tile", lambda lib, x: lib.tile(x, dims=(2,))),
    ("Tensor.tile", lambda lib, x: x.tile(dims=(2, 1, 1))),
    ("Tensor.new_zeros", lambda lib, x: x.new_zeros(size=(2,))),
    ("Tensor.sum_to_size", lambda lib, x: x.sum_to_size(size=(1, 3))),
    ("reshape", lambda lib, x: lib.reshape(x, shape=(3, 2))),
    ("randn", lambda lib, x: lib.randn(size=(2, 3)).shape),
]


@pytest.mark.parametrize("name, call", _KEYWORD_SIZE_CALLS, ids=[c[0] for c in
                                                                  _KEYWORD_SIZE_CALLS])
def test_size_and_dims_lists_by_keyword(name, call):
    """``flip(x, dims=[1])`` and friends: PyTorch takes a size list by keyword too."""
    x = microtensor.arange(6.).view(2, 3)
    got = call(microtensor, x)
    if _torch is not None:
        expected = call(_torch, _torch.arange(6.).view(2, 3))
        if isinstance(expected, _torch.Size):
            assert tuple(got) == tuple(expected)
        else:
            np.testing.assert_array_equal(got.numpy(), expected.numpy())
    else:
        assert got.numel() > 0


@pytest.mark.parametrize("call", [lambda lib, x: x.flip(1, dims=(1,)),
                                  lambda lib, x: lib.permute(x, (1, 0), dims=(1, 0)),
                                  lambda lib, x: x.flip()])
def test_size_lists_given_twice_or_not_at_all_are_refused(call):
    x = microtensor.arange(6.).view(2, 3)
    with pytest.raises(TypeError, match="dims"):
        call(microtensor, x)
    if _torch is not None:
        with pytest.raises(TypeError, match="dims"):
            call(_torch, _torch.arange(6.).view(2, 3))


def test_size_lists_by_keyword_under_vmap_and_autograd():
    x = microtensor.randn(3, 2, 4)
    out = microtensor.func.vmap(lambda t: t.flip(dims=[0]).permute(dims=(1, 0)))(x)
    np.testing.assert_array_equal(out.numpy(), x.flip(1).permute(0, 2, 1).numpy())
    y = microtensor.randn(2, 3, requires_grad=True)
    y.flip(dims=[1]).repeat(repeats=(2, 1)).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.full((2, 3), 2.0, np.float32))


def _old_batchnorm_state(lib):
    """A BatchNorm2d state dict as saved before ``num_batches_tracked`` existed."""
    return {"weight": lib.full((2,), 2.0), "bias": lib.zeros(2),
            "running_mean": lib.full((2,), 0.5), "running_var": lib.full((2,), 3.0)}


@pytest.mark.parametrize("strict", [True, False])
def test_batchnorm_loads_a_state_dict_without_num_batches_tracked(strict):
    def load(lib):
        model = lib.nn.Sequential(lib.nn.Conv2d(1, 2, 1), lib.nn.BatchNorm2d(2))
        model[1].num_batches_tracked.fill_(5)
        state = {"0." + k: v for k, v in model[0].state_dict().items()}
        state.update({"1." + k: v for k, v in _old_batchnorm_state(lib).items()})
        result = model.load_state_dict(state, strict=strict)
        return repr(result), model[1].num_batches_tracked.item(), \
            model[1].running_var.tolist(), model[1].state_dict()._metadata[""]["version"]

    got = load(microtensor)
    assert got == ("<All keys matched successfully>", 5, [3.0, 3.0], 2)
    if _torch is not None:
        assert got == load(_torch)


def test_batchnorm_state_dict_of_version_2_still_needs_num_batches_tracked():
    """With metadata saying version 2, a missing count is a missing key, as in PyTorch."""
    def load(lib):
        model = lib.nn.BatchNorm2d(2)
        state = model.state_dict()
        del state["num_batches_tracked"]
        with pytest.raises(RuntimeError, match='Missing key.*"num_batches_tracked"'):
            model.load_state_dict(state)
        return repr(model.load_state_dict(state, strict=False))

    got = load(microtensor)
    assert got == "_IncompatibleKeys(missing_keys=['num_batches_tracked'], unexpected_keys=[])"
    if _torch is not None:
        assert got == load(_torch)


def test_device_selection_boilerplate_runs():
    """The lines that open PyTorch's vision scripts: cuDNN switches and device choice."""
    import microtensor.backends.cudnn as cudnn
    saved = cudnn.benchmark, cudnn.deterministic
    try:
        cudnn.benchmark = True
        microtensor.backends.cudnn.deterministic = True
        assert (cudnn.benchmark, cudnn.deterministic) == (True, True)
    finally:
        cudnn.benchmark, cudnn.deterministic = saved
    has_cuda = microtensor.cuda.is_available()
    assert microtensor.accelerator.is_available() is has_cuda
    device = (microtensor.accelerator.current_accelerator().type
              if microtensor.accelerator.is_available() else "cpu")
    assert device == ("cuda" if has_cuda else "cpu")
    device = ("cuda" if microtensor.cuda.is_available()
              else "mps" if microtensor.backends.mps.is_available() else "cpu")
    assert microtensor.ones(2).to(device).device.type == device
    if not has_cuda:
        assert microtensor.accelerator.current_accelerator() is None
        assert microtensor.accelerator.device_count() == 0
        with pytest.raises(RuntimeError, match="none is available"):
            microtensor.accelerator.current_device_index()


@needs_torch
def test_cudnn_switches_and_flags_match_torch_without_cudnn():
    def switches(lib):
        c = lib.backends.cudnn
        return (c.enabled, c.benchmark, c.deterministic, c.allow_tf32, c.benchmark_limit,
                c.is_available(), c.version())

    assert switches(microtensor) == switches(_torch)
    for lib in (microtensor, _torch):
        before = switches(lib)
        with lib.backends.cudnn.flags(enabled=False, deterministic=True):
            assert (lib.backends.cudnn.enabled, lib.backends.cudnn.deterministic) == \
                (False, True)
        assert switches(lib) == before
    assert microtensor.backends.mps.is_available() == _torch.backends.mps.is_available()
    assert microtensor.backends.mps.is_built() == _torch.backends.mps.is_built()


def test_round_to_decimals_as_metrics_print_them():
    values = [1.2345, 2.5, -0.125, 1234.5678, 2.675]
    x = microtensor.tensor(values, requires_grad=True)
    got = [microtensor.round(x, decimals=2), x.round(decimals=-2), x.round(decimals=1),
           x[1].round(decimals=1)]
    got[0].sum().backward()
    assert x.grad.tolist() == [0.0] * 5
    y = microtensor.tensor([1.25, 2.35])
    y.round_(decimals=1)
    with pytest.raises(NotImplementedError, match="round_cpu.*Long"):
        microtensor.round(microtensor.tensor([1, 2]), decimals=1)
    if _torch is not None:
        t = _torch.tensor(values)
        expected = [_torch.round(t, decimals=2), t.round(decimals=-2), t.round(decimals=1),
                    t[1].round(decimals=1)]
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a.detach().numpy(), b.numpy())
        np.testing.assert_array_equal(y.numpy(),
                                      _torch.tensor([1.25, 2.35]).round_(decimals=1).numpy())


def test_seeding_and_amp_boilerplate_runs():
    """``seed_everything`` and the mixed-precision lines of training scripts, with AMP off."""
    microtensor.manual_seed(0)
    microtensor.cuda.manual_seed(0)
    microtensor.cuda.manual_seed_all(0)
    microtensor.cuda.empty_cache()
    a = microtensor.rand(3)
    microtensor.manual_seed(0)
    microtensor.cuda.manual_seed_all(1)        # the default generator is not reseeded
    np.testing.assert_array_equal(microtensor.rand(3).numpy(), a.numpy())

    from microtensor.cuda.amp import GradScaler, autocast
    with pytest.warns(FutureWarning, match="amp.GradScaler\\('cuda', args...\\)"):
        scaler = GradScaler(enabled=False)
    assert isinstance(scaler, microtensor.amp.GradScaler) and not scaler.is_enabled()
    with pytest.warns(FutureWarning, match="amp.autocast\\('cuda', args...\\)"):
        ctx = autocast(enabled=False)
    model = microtensor.nn.Linear(2, 1)
    with ctx, microtensor.amp.autocast("cpu", enabled=False):
        loss = model(microtensor.ones(4, 2)).pow(2).mean()
    scaler.scale(loss).backward()
    optimizer = microtensor.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    scaler.step(optimizer)
    scaler.update()
    assert not microtensor.equal(model.weight, before)
    assert microtensor.amp.autocast is microtensor.autocast
    if _torch is not None:
        import inspect
        for name in ("GradScaler", "autocast"):
            ours = inspect.signature(getattr(microtensor.cuda.amp, name))
            theirs = inspect.signature(getattr(_torch.cuda.amp, name))
            assert list(ours.parameters) == list(theirs.parameters)


@needs_torch
def test_training_resumes_in_microtensor_from_a_pytorch_checkpoint():
    """A checkpoint PyTorch saved (weights, AdamW state, scheduler) loads with
    ``microtensor.load`` and training goes on as it does in PyTorch."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((3, 1, 4, 4)).astype(np.float32)
    labels = np.array([0, 1, 1])

    def build(lib):
        # no conv bias: BatchNorm cancels its gradient, which Adam would scale up from noise
        return lib.nn.Sequential(lib.nn.Conv2d(1, 2, 3, bias=False), lib.nn.BatchNorm2d(2),
                                 lib.nn.ReLU(), lib.nn.Flatten(), lib.nn.Linear(8, 2))

    def step(lib, model, optimizer, scheduler):
        optimizer.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(lib.tensor(images)), lib.tensor(labels))
        loss.backward()
        optimizer.step()
        scheduler.step()
        return loss.item()

    def optimizer_of(lib, model):
        optimizer = lib.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
        return optimizer, lib.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)

    ref = build(_torch)
    ref_opt, ref_sched = optimizer_of(_torch, ref)
    for _ in range(2):
        step(_torch, ref, ref_opt, ref_sched)
    buffer = io.BytesIO()
    _torch.save({"model": ref.state_dict(), "optimizer": ref_opt.state_dict(),
                 "scheduler": ref_sched.state_dict(), "epoch": 2}, buffer)
    buffer.seek(0)
    checkpoint = microtensor.load(buffer)
    assert checkpoint["epoch"] == 2
    model = build(microtensor)
    model.load_state_dict(checkpoint["model"])
    optimizer, scheduler = optimizer_of(microtensor, model)
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    for _ in range(3):
        np.testing.assert_allclose(step(microtensor, model, optimizer, scheduler),
                                   step(_torch, ref, ref_opt, ref_sched), rtol=1e-5)
    assert optimizer.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    for (key, expected), actual in zip(ref.state_dict().items(), model.state_dict().values()):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=key)


def test_load_with_a_map_location_function():
    """``torch.load(f, map_location=lambda storage, loc: storage)``, the idiom of older
    scripts for GPU checkpoints on a CPU: the function gets each loaded storage and its
    saved location and returns the storage to use (None: the saved location)."""
    state = microtensor.nn.BatchNorm2d(2).state_dict()
    state["running_mean"].fill_(0.5)
    seen = []

    def keep_on_cpu(storage, location):
        seen.append(location)
        return storage

    for map_location, expected in ((keep_on_cpu, ["cpu"] * 5), (lambda s, loc: None, [])):
        buffer = io.BytesIO()
        microtensor.save(state, buffer)
        buffer.seek(0)
        seen.clear()
        loaded = microtensor.load(buffer, map_location=map_location)
        assert seen == expected
        assert loaded["running_mean"].tolist() == [0.5, 0.5]
        assert loaded["num_batches_tracked"].dtype == microtensor.int64
    if _torch is not None:
        buffer = io.BytesIO()
        _torch.save(_torch.nn.Conv2d(1, 2, 3).state_dict(), buffer)
        buffer.seek(0)
        loaded = microtensor.load(buffer, map_location=lambda storage, loc: storage)
        assert [tuple(v.shape) for v in loaded.values()] == [(2, 1, 3, 3), (2,)]
