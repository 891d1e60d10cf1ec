"""sigma_ensemble: function-preserving conversion of any nn.Module, shared weights, new module."""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ensemblize as ez
from ensemblize.nn.sigma_norm import SigmaNorm


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.inner = nn.Sequential(nn.Conv2d(c, c, 1), nn.GroupNorm(2, c), nn.ReLU())

    def forward(self, x):
        return torch.relu(x + self.inner(self.bn(self.conv(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.blocks = nn.ModuleList([Block(4), Block(4)])
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(4 * 8 * 8, 16), nn.BatchNorm1d(16), nn.LayerNorm(16), nn.Linear(16, 3)
        )

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _pretrained_net(seed=0):
    torch.manual_seed(seed)
    net = Net()
    # make the affine parameters and running statistics non-trivial, as after training
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)):
                m.weight.normal_(0, 1.5)  # includes negative and > 1 weights
                m.bias.normal_()
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2)
    return net


def test_noise_zero_is_function_preserving_in_eval_and_train():
    net = _pretrained_net()
    x = torch.randn(5, 1, 8, 8)
    for training in (False, True):
        ref_net = copy.deepcopy(net).train(training)
        ens = ez.sigma_ensemble(net, members=3, noise=0.0).train(training)
        out = ens(x)
        ref = ref_net(x)
        assert out.shape == (5, 3, 3)
        for m in range(3):
            torch.testing.assert_close(out[:, m], ref, atol=1e-5, rtol=1e-5)
        if training:  # running statistics of every member follow the original's
            plain = [m for m in ref_net.modules() if isinstance(m, nn.BatchNorm2d)]
            sig = [m for m in ens.modules() if isinstance(m, ez.nn.SigmaBatchNorm2d)]
            for p, s in zip(plain, sig, strict=True):
                torch.testing.assert_close(
                    s.running_mean, p.running_mean.expand_as(s.running_mean), atol=1e-5, rtol=1e-5
                )
                torch.testing.assert_close(
                    s.running_var, p.running_var.expand_as(s.running_var), atol=1e-5, rtol=1e-5
                )


def test_input_model_is_untouched_and_a_new_module_is_returned():
    net = _pretrained_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    kinds = [type(m) for m in net.modules()]
    ens = ez.sigma_ensemble(net, members=2)
    ens.train()(torch.randn(4, 1, 8, 8)).sum().backward()
    assert [type(m) for m in net.modules()] == kinds
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in net.parameters())
    assert not any(
        isinstance(m, (nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)) for m in ens.modules()
    )


def test_only_norm_parameters_grow_and_everything_else_is_shared():
    net = _pretrained_net()
    M = 4
    ens = ez.sigma_ensemble(net, members=M)
    norm_features = sum(
        m.weight.numel()
        for m in net.modules()
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm))
    )
    n_old = sum(p.numel() for p in net.parameters())
    n_new = sum(p.numel() for p in ens.parameters())
    # per norm layer of C features: w, b (2C) become shared w (C) + per-member b, γ (2MC)
    assert n_new - n_old == (2 * M - 1) * norm_features
    non_norm_old = sum(p.numel() for n, p in net.named_parameters() if not _is_norm_param(net, n))
    non_norm_new = sum(
        p.numel() for n, p in ens.named_parameters() if not isinstance(_owner(ens, n), SigmaNorm)
    )
    assert non_norm_old == non_norm_new


def _owner(model, pname):
    return model.get_submodule(pname.rsplit(".", 1)[0])


def _is_norm_param(model, pname):
    return isinstance(_owner(model, pname), (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm))


def test_default_noise_makes_members_differ_and_seed_is_reproducible():
    net = _pretrained_net().eval()
    x = torch.randn(6, 1, 8, 8)
    out = ez.sigma_ensemble(net, members=4, seed=1).eval()(x)
    assert (out[:, 0] - out[:, 1]).abs().max() > 1e-3
    again = ez.sigma_ensemble(net, members=4, seed=1).eval()(x)
    torch.testing.assert_close(out, again)


def test_bad_arguments():
    with pytest.raises(ValueError, match="no BatchNorm/LayerNorm/GroupNorm"):
        ez.sigma_ensemble(nn.Sequential(nn.Linear(3, 3)), members=2)
    with pytest.raises(ValueError, match="members"):
        ez.sigma_ensemble(_pretrained_net(), members=0)
    with pytest.raises(ValueError, match="noise"):
        ez.sigma_ensemble(_pretrained_net(), members=2, noise=-1.0)
    with pytest.raises(TypeError, match="nn.Module"):
        ez.sigma_ensemble(lambda x: x, members=2)


def test_outputs_in_containers_are_unfolded():
    class Multi(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(3)

        def forward(self, x, scale=None):
            y = self.ln(x)
            return {"y": y, "pair": (y.sum(-1), torch.tensor(1.0))}

    ens = ez.sigma_ensemble(Multi(), members=2, noise=0.0)
    out = ens(torch.randn(5, 3))
    assert out["y"].shape == (5, 2, 3) and out["pair"][0].shape == (5, 2) and out["pair"][1].dim() == 0


def test_huggingface_transformer_converts_and_preserves_function():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(cfg)
    ids = torch.randint(0, 40, (4, 7))
    mask = torch.ones(4, 7, dtype=torch.long)
    mask[0, 5:] = 0
    ens = ez.sigma_ensemble(model, members=3, noise=0.0)
    assert len(ens.converted) == 1 + 2 * 2  # embeddings LN + two LNs per layer
    for training in (False, True):
        model.train(training)
        ens.train(training)
        ref = model(input_ids=ids, attention_mask=mask).logits
        out = ens(input_ids=ids, attention_mask=mask).logits
        assert out.shape == (4, 3, 3)
        for m in range(3):
            torch.testing.assert_close(out[:, m], ref, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------- layers the conversion must respect
class _ChannelsFirstLayerNorm(nn.LayerNorm):
    """ConvNeXt's form: a LayerNorm subclass normalising the channels of (B, C, H, W)."""

    def forward(self, x):
        y = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return y.permute(0, 3, 1, 2)


def test_a_norm_subclass_that_overrides_forward_is_left_alone_with_a_warning():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 1),
        _ChannelsFirstLayerNorm(8),
        nn.BatchNorm2d(8),
        nn.Flatten(),
        nn.Linear(8 * 8 * 8, 3),
    ).eval()
    with pytest.warns(UserWarning, match=r"left \['1'\].*_ChannelsFirstLayerNorm.*override forward"):
        ens = ez.sigma_ensemble(model, members=2, noise=0.0)
    assert ens.converted == ["2"] and type(ens.backbone[1]) is _ChannelsFirstLayerNorm
    x = torch.randn(3, 3, 8, 8)  # W == C: a wrong conversion would run silently
    torch.testing.assert_close(ens(x), model(x)[:, None].expand(-1, 2, -1), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match=r"\['1'\] cannot be converted.*override forward"):
        ez.sigma_ensemble(model, layers=["1"])
    only_custom = nn.Sequential(nn.Conv2d(3, 8, 1), _ChannelsFirstLayerNorm(8))
    with (
        pytest.warns(UserWarning),
        pytest.raises(ValueError, match="_ChannelsFirstLayerNorm.*override forward"),
    ):
        ez.sigma_ensemble(only_custom)


def test_a_shared_norm_layer_stays_shared_and_answers_to_every_path():
    bn = nn.BatchNorm1d(4)

    class TwoParents(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Linear(4, 4), bn)
            self.b = nn.Sequential(bn, nn.Linear(4, 2))

        def forward(self, x):
            return self.b(self.a(x))

    for layers in (None, ["a.1"], ["b.0"]):
        ens = ez.sigma_ensemble(TwoParents(), members=2, layers=layers, seed=0)
        assert ens.converted == ["a.1"]
        assert ens.backbone.a[1] is ens.backbone.b[0] and isinstance(ens.backbone.a[1], SigmaNorm)
    # one set of per-member parameters, as in the original one set of norm parameters
    norm_params = [n for n, _ in ens.named_parameters() if "a.1." in n or "b.0." in n]
    assert len(norm_params) == 3


def test_a_shared_layer_is_named_as_named_modules_names_it_so_the_name_works_everywhere():
    """Registered directly on a parent after a container holding it, the layer was 'alias' in
    converted but 'blocks.0' in sigma_layers / sharing, which then refused converted's name."""

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(4, 8)
            self.blocks = nn.ModuleList([nn.LayerNorm(8)])
            self.alias = self.blocks[0]

        def forward(self, x):
            return self.alias(self.l1(x))

    from ensemblize.sigma.convert import norm_layer_names

    for layers in (None, ["alias"], ["blocks.0"]):
        ens = ez.sigma_ensemble(Shared(), members=2, layers=layers)
        assert ens.converted == norm_layer_names(Shared()) == ["blocks.0"]
        assert [s.name for s in ez.diversity.sharing(ens.backbone, layers=ens.converted)] == ["blocks.0"]


def test_no_convertible_norm_errors_say_why():
    with pytest.raises(ValueError, match=r"the model is itself a BatchNorm1d layer.*nn\.Sequential\(model\)"):
        ez.sigma_ensemble(nn.BatchNorm1d(4), members=2)
    instance_only = nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=True))
    with (
        pytest.warns(UserWarning),
        pytest.raises(
            ValueError,
            match=r"no BatchNorm/LayerNorm/GroupNorm layer to convert \(its \['1'\] are \['InstanceNorm2d'\]",
        ),
    ):
        ez.sigma_ensemble(instance_only, members=2)


class _ThirdPartyRMSNorm(nn.Module):
    """A norm class torch does not ship (as LlamaRMSNorm / T5LayerNorm): x / rms(x) * w."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _CustomBatchNorm(nn.modules.batchnorm._BatchNorm):
    def _check_input_dim(self, x):
        pass


def test_norm_layers_left_shared_are_named_and_batch_statistics_that_mix_members_are_said():
    """A third-party norm class was skipped without a word; a BatchNorm-family layer left plain pooled the
    batch statistics of all members (member 0's gates moved the other members' outputs) silently."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 8), _ThirdPartyRMSNorm(8), nn.Linear(8, 3)
    )
    with pytest.warns(UserWarning, match=r"left \['3'\] shared: their class\(es\) \['_ThirdPartyRMSNorm'\]"):
        assert ez.sigma_ensemble(net, members=2).converted == ["1"]
    # a predicate, even one that takes everything, is not a deliberate list: the warning stays
    with pytest.warns(UserWarning, match=r"left \['3'\] shared"):
        ez.sigma_ensemble(net, members=2, layers=lambda name, layer: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ez.sigma_ensemble(net, members=2, layers=["1"])  # the layers to convert, named: no warning
    only = nn.Sequential(nn.Linear(6, 8), _ThirdPartyRMSNorm(8))
    with (
        pytest.warns(UserWarning),
        pytest.raises(ValueError, match=r"its \['1'\] are \['_ThirdPartyRMSNorm'\]"),
    ):
        ez.sigma_ensemble(only, members=2)
    mixed = nn.Sequential(
        nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 8), _CustomBatchNorm(8), nn.Linear(8, 3)
    )
    with pytest.warns(
        UserWarning, match=r"left \['3'\] as shared layers that pool statistics.*depends on the other"
    ):
        ens = ez.sigma_ensemble(mixed, members=3, noise=0.5, seed=0).train()
    # the warning is true: member 0's gates move the other members through the pooled statistics
    x = torch.randn(16, 6)
    before = ens(x).detach()
    with torch.no_grad():
        ens.backbone[1].gate_logits[0] += 3.0
    assert (ens(x)[:, 1:] - before[:, 1:]).abs().max() > 1e-3
    deselected = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 8), nn.BatchNorm1d(8))
    with pytest.warns(UserWarning, match=r"left \['3'\] as shared layers that pool statistics"):
        ez.sigma_ensemble(deselected, members=2, layers=["1"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left shared: no warning
        ez.sigma_ensemble(deselected, members=2)
        # a BatchNorm before every σNorm (a plain stem) sees M identical copies of each row: no mixing
        ez.sigma_ensemble(deselected, members=2, layers=["3"])


def test_a_batch_norm_whose_flag_disagrees_with_its_buffers_is_refused_naming_it():
    """torch reads the buffers, not track_running_stats, in eval: a flag changed after construction made the
    conversion use batch statistics where the model used running ones (not function-preserving), or crash."""
    kept = nn.Sequential(nn.Linear(6, 8), nn.Sequential(nn.BatchNorm1d(8)))
    kept[1][0].track_running_stats = False
    with pytest.raises(
        ValueError, match=r"^1\.0 \(BatchNorm1d\): track_running_stats=False, but .*running stat"
    ):
        ez.sigma_ensemble(kept, members=2)
    dropped = nn.Sequential(nn.BatchNorm1d(4))
    dropped[0].running_mean = dropped[0].running_var = None
    with pytest.raises(ValueError, match=r"^0 \(BatchNorm1d\): track_running_stats=True, but running_mean"):
        ez.sigma_ensemble(dropped, members=2)
    sync = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Sequential(nn.Conv2d(4, 4, 1), nn.SyncBatchNorm(4)))
    with pytest.raises(TypeError, match=r"^1\.1 \(SyncBatchNorm\): SyncBatchNorm cannot be converted"):
        ez.sigma_ensemble(sync, members=2)


def test_tensors_inside_list_and_dict_arguments_are_repeated_for_the_members():
    """A batch-sized tensor in a list argument was passed unrepeated: a bare torch size mismatch."""

    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(4)

        def forward(self, inputs, extras):
            return self.ln(inputs["x"] + extras[0])

    torch.manual_seed(0)
    net = TwoInputs()
    ens = ez.sigma_ensemble(net, members=3, noise=0.0)
    x, e = torch.randn(5, 4), torch.randn(5, 4)
    out = ens({"x": x}, [e])
    assert out.shape == (5, 3, 4)
    for m in range(3):
        torch.testing.assert_close(out[:, m], net({"x": x}, [e]), rtol=0, atol=1e-6)


def test_frozen_norms_stay_frozen_hooks_are_named_and_the_wrapper_keeps_the_model_mode():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    for p in model[1].parameters():
        p.requires_grad_(False)
    model[1].register_forward_hook(lambda *args: None)
    model.eval()
    with pytest.warns(UserWarning, match=r"dropped the hooks registered on \['1'\]"):
        ens = ez.sigma_ensemble(model, members=2)
    grads = {n: p.requires_grad for n, p in ens.backbone[1].named_parameters()}
    assert grads == {"weight": False, "bias": False, "gate_logits": True}
    assert not ens.training and not ens.backbone[1].training
    # predict / validation restore every submodule's own mode: the layers stay in eval mode
    from ensemblize.training import predict

    x = torch.randn(6, 4)
    before = ens(x)
    predict(ens, x, progress=False)
    assert all(not m.training for m in ens.modules())
    torch.testing.assert_close(ens(x), before, rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mixed = ez.sigma_ensemble(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4).eval()), members=2)
    assert mixed.training and not mixed.backbone[1].training


def test_converting_an_ensemble_again_says_so():
    ens = ez.sigma_ensemble(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), members=2)
    with pytest.raises(ValueError, match="already a σN ensemble"):
        ez.sigma_ensemble(ens)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("gate_init", [0.0, 1.3, -7.0])
def test_conversion_is_exact_in_the_models_own_precision(dtype, gate_init):
    """The twin is built in the model's dtype before the affine is loaded, and the initial gate is
    computed in that dtype: float64 models are preserved to the last bit, not to float32's 1e-8."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(4, 8), nn.BatchNorm1d(8), nn.LayerNorm(8), nn.GroupNorm(2, 8), nn.Linear(8, 3)
    )
    model = model.to(dtype)
    for _ in range(3):
        model(torch.randn(16, 4, dtype=dtype))
    model.eval()
    ens = ez.sigma_ensemble(model, members=2, noise=0.0, gate_init=gate_init)
    assert all(p.dtype == dtype for p in ens.parameters())
    x = torch.randn(5, 4, dtype=dtype)
    # the reference runs on the same (B·M, ...) batch the ensemble runs on: a float32 GEMM's result
    # may depend on the batch's row count (kernel blocking differs between CPUs), the conversion's may not
    reference = model(x.repeat_interleave(2, dim=0)).view(5, 2, 3)
    torch.testing.assert_close(ens(x), reference, rtol=0, atol=1e-15)


def test_a_norm_without_tensors_of_its_own_takes_the_models_dtype():
    """LayerNorm(elementwise_affine=False) / GroupNorm(affine=False) have no parameter or buffer to
    read a dtype from: the twin follows the model (a float64 model used to get float32 twins)."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(5, 5), nn.LayerNorm(5, elementwise_affine=False), nn.GroupNorm(1, 5, affine=False)
    )
    net = net.double()
    ens = ez.sigma_ensemble(net, members=3, noise=0.0)
    assert all(p.dtype == torch.float64 for p in ens.parameters())
    x = torch.randn(4, 5, dtype=torch.float64)
    torch.testing.assert_close(ens(x), net(x)[:, None].expand(-1, 3, -1), rtol=0, atol=1e-14)


def test_conversion_order_is_parents_first_as_saved_files_expect():
    """The order of ``converted`` (and of the gate-noise draws) is the one files were saved with: a
    parent's own norm children before the norms nested deeper in its later children."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)))
            self.norm = nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.blocks(x))

    ens = ez.sigma_ensemble(Net(), members=2)
    assert ens.converted == ["norm", "blocks.0.1"]
    from ensemblize.sigma.convert import norm_layer_names

    assert norm_layer_names(Net()) == ["blocks.0.1", "norm"]  # module (depth-first) order


class _Encoder(nn.Module):
    """(B, T, 8) -> (B, 3): a stock TransformerEncoderLayer, sequence-first or batch-first inside."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=batch_first)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.enc(x) if self.batch_first else self.enc(x.transpose(0, 1)).transpose(0, 1)
        return self.head(h.mean(1))


def _member_alone(ens, m, x):
    """Member m of ``ens`` computed by an ensemble whose every member is a copy of member m."""
    import copy

    e = copy.deepcopy(ens)
    for _, layer in e.sigma_layers():
        with torch.no_grad():
            layer.gate_logits.copy_(layer.gate_logits[m].expand_as(layer.gate_logits))
            layer.bias.copy_(layer.bias[m].expand_as(layer.bias))
    return e(x)[:, m]


class _TokensIntoBatch(nn.Module):
    """(B, T, 8) -> (B, 3), with a BatchNorm1d on the tokens folded into the rows (B·T, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.bn(self.lin(x).reshape(-1, 8)).reshape(x.shape)
        return self.head(h.mean(1))


def test_a_norm_that_sees_tokens_on_axis_0_is_refused_not_silently_mixed():
    """Tokens folded into the rows put B·T rows on a σNorm: members assigned per token, no error."""
    torch.manual_seed(0)
    x = torch.randn(5, 4, 8)  # T = 4 is a multiple of M = 2: the mix-up was silent
    ens = ez.sigma_ensemble(_TokensIntoBatch(), members=2, noise=2.0, seed=0).train()
    with pytest.raises(
        ValueError, match=r"SigmaBatchNorm1d 'bn' got input of shape \(40, 8\).*10 rows \(B·M\)"
    ):
        ens(x)
    ens.check_rows = False  # the documented opt-out restores the old (here wrong) behaviour
    assert ens(x).shape == (5, 2, 3)
    # batch-first: every member inside the ensemble equals that member computed alone
    ens = ez.sigma_ensemble(_Encoder(batch_first=True), members=2, noise=2.0, seed=0).train()
    with torch.no_grad():
        out = ens(x)
        for m in range(2):
            torch.testing.assert_close(out[:, m], _member_alone(ens, m, x), rtol=0, atol=1e-6)


def test_a_sequence_first_transformer_layer_is_refused_at_conversion():
    """A sequence-first encoder given (T, B, D) repeated the members along T, where attention mixed
    them: no row check could see it (every norm got T·M rows). Transposing inside was caught only at
    the first forward. Both are refused when converting, naming the layer; excluding its norms works."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=False)
    seq_first = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    with pytest.raises(ValueError, match=r"layers\.0 is a sequence-first TransformerEncoderLayer .*norm1"):
        ez.sigma_ensemble(seq_first, members=2)
    with pytest.raises(ValueError, match=r"^enc is a sequence-first TransformerEncoderLayer"):
        ez.sigma_ensemble(_Encoder(batch_first=False), members=2)
    decoder = nn.TransformerDecoderLayer(8, 2, 16, batch_first=False)
    with pytest.raises(ValueError, match=r"\(the model\) is a sequence-first TransformerDecoderLayer"):
        ez.sigma_ensemble(decoder, members=2)
    with pytest.raises(ValueError, match="batch_first"):
        ez.sigma_ensemble(nn.Sequential(nn.LayerNorm(8), seq_first), members=2)

    # the layer's norms kept plain (layers=): a norm outside it, on (B, T, D), converts and is exact
    class PreNorm(_Encoder):
        def __init__(self) -> None:
            super().__init__(batch_first=False)
            self.pre = nn.LayerNorm(8)

        def forward(self, x):
            return super().forward(self.pre(x))

    torch.manual_seed(0)
    net = PreNorm()
    with torch.no_grad():
        net.pre.weight.uniform_(0.5, 2.0)
    x = torch.randn(5, 4, 8)
    ens = ez.sigma_ensemble(net, members=2, noise=0.0, layers=["pre"])
    assert ens.converted == ["pre"]
    with torch.no_grad():
        torch.testing.assert_close(ens(x), net(x).unsqueeze(1).expand(5, 2, 3), rtol=0, atol=1e-6)


def test_the_transformer_fast_path_does_not_bypass_sigma_norm_in_eval():
    """In eval torch's fast path read norm1.bias directly: the (M, C) σNorm bias crashed predict."""
    torch.manual_seed(0)
    x = torch.randn(5, 4, 8)
    ens = ez.sigma_ensemble(_Encoder(batch_first=True), members=2, noise=2.0, seed=0)
    with torch.no_grad():
        train_out = ens.train()(x)  # dropout 0: train and eval compute the same function
        eval_out = ens.eval()(x)
    torch.testing.assert_close(eval_out, train_out, rtol=1e-5, atol=1e-5)
    assert torch.backends.mha.get_fastpath_enabled()  # no process-wide switch: other models keep it
    assert ens.backbone.enc.activation_relu_or_gelu == 0 and _Encoder(True).enc.activation_relu_or_gelu == 1


def test_an_encoder_stack_with_a_padding_mask_predicts_without_grad():
    """nn.TransformerEncoder's padding-mask fast path (eval, no grad) fed its layers a nested tensor,
    which crashed every σNorm ("NestedTensorImpl doesn't support sizes"): predict and validation failed."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2).eval()  # enable_nested_tensor=True, torch's default
    ens = ez.sigma_ensemble(enc, members=2, noise=0.0)
    assert ens.backbone.use_nested_tensor is False and enc.use_nested_tensor is True
    x = torch.randn(4, 5, 16)
    pad = torch.zeros(4, 5, dtype=torch.bool)
    pad[0, -2:] = True
    with_grad = ens(x, src_key_padding_mask=pad)
    with torch.no_grad():
        out = ens(x, src_key_padding_mask=pad)
        reference = enc(x, src_key_padding_mask=pad)  # the fast path: padded positions come back as 0
    torch.testing.assert_close(out, with_grad.detach(), rtol=0, atol=0)
    keep = ~pad
    for m in range(2):  # noise 0: each member is the original model on every unpadded position
        torch.testing.assert_close(out[:, m][keep], reference[keep], rtol=1e-5, atol=1e-5)


def test_the_row_check_is_per_thread_and_compiles_in_one_graph():
    """The expected row count lived on the shared modules: two threads calling one model with different
    batch sizes tripped each other's check; a process-wide fast-path switch broke fullgraph compile."""
    from concurrent.futures import ThreadPoolExecutor

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    ens = ez.sigma_ensemble(net, members=2, noise=1.0, seed=0).eval()
    xs = [torch.randn(b, 4) for b in (3, 5, 7, 9) * 10]
    with torch.no_grad(), ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(ens, xs))
        assert all(torch.equal(o, ens(x)) for o, x in zip(outs, xs, strict=True))
    compiled = torch.compile(ens, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(xs[0]), ens(xs[0]))


def test_converted_names_given_to_the_diversity_functions_get_a_hint():
    ens = ez.sigma_ensemble(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)), members=2)
    assert ens.converted == ["1"]
    for call in (
        lambda: ez.diversity.sharing(ens, layers=ens.converted),
        lambda: ez.diversity.softmax_temperature_loss(ens, 1.0, 0.1, layers=ens.converted),
    ):
        with pytest.raises(ValueError, match=r"unknown σNorm layer name\(s\) \['1'\].*e\.g\. 'backbone\.1'"):
            call()
    assert len(ez.diversity.sharing(ens, layers=[f"backbone.{n}" for n in ens.converted])) == 1
