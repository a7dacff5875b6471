"""``mx.mod.Module`` / ``BucketingModule`` with the pass: engines built when the weights are known, reused, rebuilt.

Each test compares with the same Module bound natively (the pass off), fp32:
``rtol=1e-4, atol=1e-5``; ``info.engines[i].run_count`` proves the engines ran.
"""
from __future__ import annotations

import logging
import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt  # noqa: F401 - the package (simple_bind hook) as users import it
from mx_trt.frontends import hook
from mx_trt.frontends import module as module_frontend
from mx_trt.pipeline import bind as pipeline_bind
from tests.harness.mxcheck import random_params

RTOL, ATOL = 1e-4, 1e-5
SHAPE = (2, 3, 8, 8)


@pytest.fixture(autouse=True)
def _module_hook(monkeypatch):
    module_frontend.install()
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")


@pytest.fixture
def passes(monkeypatch):
    """How many times the pass ran (``mx_trt.pipeline.bind.optimize`` calls)."""
    calls = []
    original = pipeline_bind.optimize

    def counting(request):
        calls.append(request.shapes)
        return original(request)

    monkeypatch.setattr(pipeline_bind, "optimize", counting)
    return calls


def cnn(data=None, name=""):
    """A small CNN: conv + BatchNorm + relu + max pool + dense."""
    x = mx.sym.var("data") if data is None else data
    x = mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name=name + "conv0")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name=name + "bn0")
    x = mx.sym.Activation(x, act_type="relu", name=name + "relu0")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=name + "pool0")
    return mx.sym.FullyConnected(x, num_hidden=10, name=name + "fc0")


def batch(*arrays, label=None):
    return mx.io.DataBatch(list(arrays), label=None if label is None else [label])


def infos(mod):
    """The BindInfo of each executor the Module runs (``None`` for a native one)."""
    mod = getattr(mod, "_curr_module", None) or mod
    return [getattr(e, "_mx_trt", None) for e in mod._exec_group.execs]


def native_module(sym, data_shapes, args, aux, label_names=None, label_shapes=None, context=None):
    """The same Module with the pass off: MXNet's own output."""
    with hook.disabled():
        mod = mx.mod.Module(sym, data_names=[n for n, _ in data_shapes], label_names=label_names,
                            context=context or mx.cpu())
        mod.bind(data_shapes=data_shapes, label_shapes=label_shapes, for_training=False)
        mod.set_params(args, aux)
    assert infos(mod) == [None] * len(infos(mod))
    return mod


def run(mod, *arrays, label=None):
    mod.forward(batch(*arrays, label=label), is_train=False)
    return [o.asnumpy() for o in mod.get_outputs()]


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_bind_set_params_forward_matches_native_and_get_params_returns_the_weights(tmp_path):
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, SHAPE)
    ref = run(native_module(sym, [("data", SHAPE)], args, aux), x)[0]

    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    assert infos(mod) == [None]  # no weights yet: nothing to build
    mod.set_params(args, aux, allow_missing=True)  # leaves the Module's own copy dirty: get_params reads the devices
    info = infos(mod)[0]
    assert info is not None and info.symbol.list_arguments() == ["data"] and len(info.absorbed) == 8
    close(run(mod, x)[0], ref)
    assert [e.run_count for e in info.engines] == [1]

    got_args, got_aux = mod.get_params()
    assert sorted(got_args) == sorted(args) and sorted(got_aux) == sorted(aux)
    for k in args:
        np.testing.assert_array_equal(got_args[k].asnumpy(), args[k].asnumpy())
    for k in aux:
        np.testing.assert_array_equal(got_aux[k].asnumpy(), aux[k].asnumpy())

    prefix = str(tmp_path / "m")
    mod.save_checkpoint(prefix, 1)
    _, saved_args, saved_aux = mx.model.load_checkpoint(prefix, 1)
    for k in args:
        np.testing.assert_array_equal(saved_args[k].asnumpy(), args[k].asnumpy())
    for k in aux:
        np.testing.assert_array_equal(saved_aux[k].asnumpy(), aux[k].asnumpy())


def test_predict_with_a_padded_last_batch():
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    rows = mx.nd.random.uniform(-1, 1, (5,) + SHAPE[1:])
    ref = native_module(sym, [("data", SHAPE)], args, aux).predict(mx.io.NDArrayIter(rows, batch_size=2))

    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.init_params(arg_params=args, aux_params=aux)
    got = mod.predict(mx.io.NDArrayIter(rows, batch_size=2))
    assert got.shape == (5, 10)
    close(got.asnumpy(), ref.asnumpy())
    assert [e.run_count for e in infos(mod)[0].engines] == [3]  # 2 + 2 + 1 padded to 2


def test_module_load_from_a_checkpoint_builds_at_bind_and_scores(tmp_path, passes):
    sym = mx.sym.SoftmaxOutput(cnn(), name="softmax")
    args, aux = random_params(sym, {"data": SHAPE, "softmax_label": (2,)})
    prefix = str(tmp_path / "model")
    mx.model.save_checkpoint(prefix, 3, sym, args, aux)
    x = mx.nd.random.uniform(-1, 1, (6,) + SHAPE[1:])
    y = mx.nd.array([0, 3, 1, 1, 9, 2])
    shapes = dict(data_shapes=[("data", SHAPE)], label_shapes=[("softmax_label", (2,))], for_training=False)

    with hook.disabled():
        ref_mod = mx.mod.Module.load(prefix, 3, data_names=["data"], label_names=["softmax_label"])
        ref_mod.bind(**shapes)
    ref_out = run(ref_mod, x[:2], label=y[:2])[0]
    ref_score = dict(ref_mod.score(mx.io.NDArrayIter(x, y, batch_size=2), ["acc", "ce"]))

    mod = mx.mod.Module.load(prefix, 3, data_names=["data"], label_names=["softmax_label"])
    mod.bind(**shapes)
    info = infos(mod)[0]
    assert info is not None and len(passes) == 1  # params known at bind: built there
    close(run(mod, x[:2], label=y[:2])[0], ref_out)
    score = dict(mod.score(mx.io.NDArrayIter(x, y, batch_size=2), ["acc", "ce"]))
    assert score["accuracy"] == ref_score["accuracy"]
    assert score["cross-entropy"] == pytest.approx(ref_score["cross-entropy"], rel=RTOL, abs=ATOL)
    assert [e.run_count for e in info.engines] == [4] and len(passes) == 1


def test_set_params_same_values_keep_the_engines_new_values_rebuild(passes):
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, SHAPE)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    first = infos(mod)[0]
    engine = first.engines[0]
    assert len(passes) == 1 and first.builds == 1
    run(mod, x)

    same_args = {k: v.copy() for k, v in args.items()}  # equal values in other arrays
    mod.set_params(same_args, aux)
    assert infos(mod)[0] is first and first.engines[0] is engine and len(passes) == 1
    run(mod, x)
    assert engine.run_count == 2

    args2 = {k: v * 0.5 for k, v in args.items()}
    aux2 = {k: v + 0.25 for k, v in aux.items()}
    mod.set_params(args2, aux2)
    second = infos(mod)[0]
    assert second is not first and len(passes) == 2 and second.builds == 1
    close(run(mod, x)[0], run(native_module(sym, [("data", SHAPE)], args2, aux2), x)[0])
    assert second.engines[0].run_count == 1 and engine.run_count == 2


def test_reshape_to_another_batch_and_back_keeps_one_variant_per_shape(passes):
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x4 = mx.nd.random.uniform(-1, 1, (4,) + SHAPE[1:])
    ref4 = run(native_module(sym, [("data", (4,) + SHAPE[1:])], args, aux), x4)[0]
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    at2 = infos(mod)[0]
    close(run(mod, x4[:2])[0], ref4[:2])

    close(run(mod, x4)[0], ref4)  # Module.forward reshapes: static engines, so a second variant
    at4 = infos(mod)[0]
    assert at4 is not at2 and len(passes) == 2

    close(run(mod, x4[:2])[0], ref4[:2])  # back: the first variant, nothing built
    assert infos(mod)[0] is at2 and len(passes) == 2
    mod.reshape(data_shapes=[("data", (4,) + SHAPE[1:])])
    close(run(mod, x4)[0], ref4)
    assert infos(mod)[0] is at4 and len(passes) == 2
    assert at2.engines[0].run_count == 2 and at4.engines[0].run_count == 2


@pytest.mark.parametrize("how", ["environment", "configure"])
def test_reshape_inside_the_batch_profile_builds_nothing(how, monkeypatch, passes):
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, (6,) + SHAPE[1:])
    ref = run(native_module(sym, [("data", (6,) + SHAPE[1:])], args, aux), x)[0]
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    if how == "environment":
        monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    else:
        monkeypatch.setenv("MXNET_USE_TENSORRT", "0")  # configure(enabled=True) wins over the switch
        module_frontend.configure(mod, enabled=True, max_batch_size=8)
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    info = infos(mod)[0]
    assert info is not None and info.engines[0].engine.batch_ranges == [(1, 2, 8)]
    for n in (2, 6, 3, 2, 6):
        close(run(mod, x[:n])[0], ref[:n])
        assert infos(mod)[0] is info  # the accelerated executor reshaped: same engines
    assert len(passes) == 1 and info.builds == 1 and info.engines[0].build_count == 1
    assert info.engines[0].run_count == 5


def test_bucketing_module_buckets_share_engines_inside_one_profile(monkeypatch, passes):
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, (4,) + SHAPE[1:])
    ref = run(native_module(sym, [("data", (4,) + SHAPE[1:])], args, aux), x)[0]

    def sym_gen(key):  # buckets keyed by batch size: the same graph, shapes inside one profile
        return cnn(), ("data",), None

    def bucket(key):
        shape = (key,) + SHAPE[1:]
        return mx.io.DataBatch([x[:key]], bucket_key=key, provide_data=[mx.io.DataDesc("data", shape)])

    bm = mx.mod.BucketingModule(sym_gen, default_bucket_key=2, context=mx.cpu())
    bm.bind(data_shapes=[("data", SHAPE)], for_training=False)
    bm.set_params(args, aux)
    bm.forward(bucket(2), is_train=False)
    close(bm.get_outputs()[0].asnumpy(), ref[:2])
    b2 = infos(bm)[0]
    bm.forward(bucket(4), is_train=False)
    close(bm.get_outputs()[0].asnumpy(), ref)
    b4 = infos(bm)[0]
    assert b4 is not b2 and b4.builds == 0 and b4.reuses == 1  # the engine of bucket 2 serves batch 4
    assert b4.engines[0].engine is b2.engines[0].engine
    assert b2.engines[0].run_count == 1 and b4.engines[0].run_count == 1

    # set_params reaches the current bucket only; the other one sees the change at its next forward
    args2 = {k: v * 0.5 for k, v in args.items()}
    bm.switch_bucket(2, [mx.io.DataDesc("data", SHAPE)])
    bm.set_params(args2, aux, force_init=True)
    bm.forward(bucket(4), is_train=False)
    close(bm.get_outputs()[0].asnumpy(), run(native_module(sym, [("data", (4,) + SHAPE[1:])], args2, aux), x)[0])
    assert infos(bm)[0] is not b4
    got, _ = bm.get_params()
    np.testing.assert_array_equal(got["fc0_weight"].asnumpy(), args2["fc0_weight"].asnumpy())


def test_training_module_stays_native_with_one_warning(caplog):
    sym = mx.sym.SoftmaxOutput(cnn(), name="softmax")
    args, aux = random_params(sym, {"data": SHAPE, "softmax_label": (2,)})
    x = mx.nd.random.uniform(-1, 1, SHAPE)
    y = mx.nd.array([1, 2])
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
        mod.bind(data_shapes=[("data", SHAPE)], label_shapes=[("softmax_label", (2,))], for_training=True)
        mod.set_params(args, aux)
        mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.1})
        mod.forward(batch(x, label=y), is_train=True)
        mod.backward()
        mod.update()
        out = run(mod, x, label=y)[0]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "for_training=True" in warnings[0].getMessage()
    assert infos(mod) == [None]
    trained_args, trained_aux = mod.get_params()
    ref = native_module(sym, [("data", SHAPE)], trained_args, trained_aux, label_names=["softmax_label"],
                        label_shapes=[("softmax_label", (2,))])
    close(out, run(ref, x, label=y)[0])


def test_two_data_inputs():
    a, b = mx.sym.var("a"), mx.sym.var("b")
    sym = cnn(mx.sym.concat(a, b, dim=1, name="cat"))
    shapes = [("a", SHAPE), ("b", (2, 2, 8, 8))]
    args, aux = random_params(sym, dict(shapes))
    xa, xb = mx.nd.random.uniform(-1, 1, SHAPE), mx.nd.random.uniform(-1, 1, (2, 2, 8, 8))
    ref = run(native_module(sym, shapes, args, aux), xa, xb)[0]
    mod = mx.mod.Module(sym, data_names=["a", "b"], label_names=None)
    mod.bind(data_shapes=shapes, for_training=False)
    mod.set_params(args, aux)
    info = infos(mod)[0]
    assert info.symbol.list_arguments() == ["a", "b"]
    close(run(mod, xa, xb)[0], ref)
    assert sum(e.run_count for e in info.engines) == len(info.engines) >= 1


def test_two_contexts_each_run_their_engines():
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, (4,) + SHAPE[1:])
    ref = run(native_module(sym, [("data", (4,) + SHAPE[1:])], args, aux), x)[0]
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=[mx.cpu(0), mx.cpu(1)])
    mod.bind(data_shapes=[("data", (4,) + SHAPE[1:])], for_training=False)
    mod.set_params(args, aux)
    close(run(mod, x)[0], ref)
    assert [[e.run_count for e in i.engines] for i in infos(mod)] == [[1], [1]]


def test_training_mode_forward_runs_native_then_engines_again():
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, SHAPE)
    native = native_module(sym, [("data", SHAPE)], args, aux)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    info = infos(mod)[0]
    native.forward(batch(x), is_train=True)
    mod.forward(batch(x), is_train=True)  # BatchNorm on batch statistics: MXNet's own executors
    close(mod.get_outputs()[0].asnumpy(), native.get_outputs()[0].asnumpy())
    assert infos(mod) == [None] and info.engines[0].run_count == 0
    close(run(mod, x)[0], run(native, x)[0])
    assert infos(mod)[0] is info and info.engines[0].run_count == 1


def test_a_failing_pass_warns_once_and_runs_natively(monkeypatch, caplog):
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, SHAPE)
    ref = run(native_module(sym, [("data", SHAPE)], args, aux), x)[0]

    def broken(request):
        raise RuntimeError("no engine today")

    monkeypatch.setattr(module_frontend, "pipeline_bind", broken)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
        mod.set_params(args, aux)
        outs = [run(mod, x)[0] for _ in range(3)]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "no engine today" in warnings[0].getMessage()
    assert "Module.set_params runs natively" in warnings[0].getMessage()
    assert infos(mod) == [None]
    for out in outs:
        close(out, ref)

    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    with pytest.raises(RuntimeError, match="no engine today"):
        mod.set_params(args, aux)


def test_switch_off_is_mxnet_and_read_at_set_params(monkeypatch, caplog):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "0")
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, SHAPE)
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
        mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
        mod.set_params(args, aux)
        off = run(mod, x)[0]
    assert infos(mod) == [None] and not caplog.records
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    mod.set_params(args, aux)
    info = infos(mod)[0]
    assert info is not None
    close(run(mod, x)[0], off)
    assert info.engines[0].run_count == 1
    monkeypatch.setenv("MXNET_USE_TENSORRT", "0")
    mod.set_params(args, aux)
    assert infos(mod) == [None]


def test_install_is_idempotent_and_keeps_the_originals():
    module_frontend.install()
    group_cls = mx.module.executor_group.DataParallelExecutorGroup
    for cls, name in ((group_cls, "set_params"), (group_cls, "forward"), (mx.mod.Module, "bind")):
        wrapper = getattr(cls, name)
        assert not hasattr(wrapper.__wrapped__, "__wrapped__")
    assert os.environ["MXNET_USE_TENSORRT"] == "1"


def test_inference_module_sharing_a_training_module_follows_its_updates(passes):
    sym = mx.sym.SoftmaxOutput(cnn(), name="softmax")
    args, aux = random_params(sym, {"data": SHAPE, "softmax_label": (2,)})
    x, y = mx.nd.random.uniform(-1, 1, SHAPE), mx.nd.array([1, 2])
    shapes = dict(data_shapes=[("data", SHAPE)], label_shapes=[("softmax_label", (2,))])
    train = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
    train.bind(for_training=True, **shapes)
    train.set_params(args, aux)
    train.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.5})
    pred = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
    pred.bind(for_training=False, shared_module=train, **shapes)
    run(pred, x, label=y)
    before = infos(pred)[0]
    assert before is not None and module_frontend.accelerated_executors(pred) == pred._exec_group.execs

    train.forward(batch(x, label=y), is_train=True)
    train.backward()
    train.update()  # in place, no set_params: the shared weights moved
    out = run(pred, x, label=y)[0]
    after = infos(pred)[0]
    assert after is not before and after.engines[0].run_count == 1 and len(passes) == 2
    trained_args, trained_aux = train.get_params()
    ref = native_module(sym, [("data", SHAPE)], trained_args, trained_aux, label_names=["softmax_label"],
                        label_shapes=[("softmax_label", (2,))])
    close(out, run(ref, x, label=y)[0])


@pytest.mark.slow
def test_resnet18_exported_from_gluon_loaded_as_a_module(tmp_path):
    net = mx.gluon.model_zoo.vision.get_model("resnet18_v1", classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.random.uniform(-1, 1, (4, 3, 32, 32))
    net(x)
    rng = np.random.RandomState(0)
    for p in net.collect_params().values():  # BatchNorm statistics away from 0/1
        if p.name.endswith("running_mean"):
            p.set_data(mx.nd.array(rng.uniform(-0.1, 0.1, p.shape)))
        elif p.name.endswith("running_var"):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
    prefix = str(tmp_path / "resnet18")
    net.export(prefix, 0)
    shapes = dict(data_shapes=[("data", x.shape)], for_training=False)
    with hook.disabled():
        ref_mod = mx.mod.Module.load(prefix, 0, data_names=["data"], label_names=None)
        ref_mod.bind(**shapes)
    ref = run(ref_mod, x)[0]
    mod = mx.mod.Module.load(prefix, 0, data_names=["data"], label_names=None)
    mod.bind(**shapes)
    info = infos(mod)[0]
    assert info is not None and info.symbol.list_arguments() == ["data"]
    close(run(mod, x)[0], ref)
    assert all(e.run_count == 1 for e in info.engines) and info.engines


def test_configure_after_bind_rebuilds_with_the_options_and_rejects_bad_ones(passes):
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, SHAPE)
    ref = run(native_module(sym, [("data", SHAPE)], args, aux), x)[0]
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    assert infos(mod)[0].symbol.list_arguments() == ["data"]
    with pytest.raises(mx_trt.MxTrtError, match="unknown option"):
        module_frontend.configure(mod, max_batch=8)
    module_frontend.configure(mod, exclude_ops=["FullyConnected"])
    assert infos(mod) == [None] and len(passes) == 1  # dropped; built again at the next forward
    close(run(mod, x)[0], ref)
    info = infos(mod)[0]
    assert len(passes) == 2 and "fc0_weight" in info.symbol.list_arguments()
    assert info.engines[0].run_count == 1
    module_frontend.configure(mod, enabled=False)
    close(run(mod, x)[0], ref)
    assert infos(mod) == [None] and len(passes) == 2


def test_variants_per_shape_are_bounded(passes):
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    x = mx.nd.random.uniform(-1, 1, (6,) + SHAPE[1:])
    ref = run(native_module(sym, [("data", (6,) + SHAPE[1:])], args, aux), x)[0]
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    for n in (1, 3, 4, 5, 6):
        close(run(mod, x[:n])[0], ref[:n])
    kept = mod._exec_group._mx_trt_state.variants[0]
    assert len(passes) == 6 and len(kept) == module_frontend.MAX_VARIANTS
    assert [s[0][1][0] for s in kept] == [3, 4, 5, 6]  # the least recently used (batch 2, then 1) went
    close(run(mod, x[:6])[0], ref)
    assert len(passes) == 6
