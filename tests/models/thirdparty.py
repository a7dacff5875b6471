"""Builders for GluonCV and GluonNLP models, offline, with seeded random weights.

Each builder returns a :class:`Model`: the exported symbol (as MXNet would load
it from ``<prefix>-symbol.json``), its arg and aux params, the data input
shapes and dtypes, and seeded inputs. Nothing is downloaded: GluonCV models are
built with ``pretrained=False, pretrained_base=False`` and GluonNLP's BERT with
its own small vocabulary.

Random weights make deep networks overflow (NaN/Inf after about 50 layers), so
BatchNorm's ``running_var`` is set to 1 and its ``gamma`` to small
values so that outputs stay finite.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Tuple

import numpy as np


@dataclass
class Model:
    """One exported model and what it takes to run it.

    Attributes:
        name: Short name.
        sym: The symbol exported by Gluon (``HybridBlock.export``).
        args / aux: Parameters by name.
        shapes / dtypes: Data input shapes and dtypes.
        inputs: Seeded input arrays.
        kind: ``"detection"``, ``"segmentation"``, ``"pose"`` or ``"nlp"``.
    """

    name: str
    sym: Any
    args: Dict[str, Any]
    aux: Dict[str, Any]
    shapes: Dict[str, Tuple[int, ...]]
    dtypes: Dict[str, str]
    inputs: Dict[str, np.ndarray]
    kind: str
    params: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.params = {**self.args, **self.aux}


def _export(net: Any, sample: List[Any], seed: int) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """Hybridize, run once, export, load back: the symbol and params a user ships."""
    import mxnet as mx

    net.hybridize(static_alloc=False)
    net(*sample)
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "model")
        net.export(prefix, epoch=0)
        sym = mx.sym.load(prefix + "-symbol.json")
        saved = mx.nd.load(prefix + "-0000.params")
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    _tame(args, aux, seed)
    return sym, args, aux


def _tame(args: Dict[str, Any], aux: Dict[str, Any], seed: int) -> None:
    """Keep random deep networks finite: unit variance and small gamma in BatchNorm."""
    import mxnet as mx

    rng = np.random.RandomState(seed)
    for k in list(aux):
        if k.endswith("running_var") or k.endswith("moving_var"):
            aux[k] = mx.nd.ones(aux[k].shape)
        elif k.endswith("running_mean") or k.endswith("moving_mean"):
            aux[k] = mx.nd.array(rng.uniform(-0.05, 0.05, aux[k].shape))
    for k in list(args):
        if k.endswith("gamma"):
            args[k] = mx.nd.array(rng.uniform(0.3, 0.7, args[k].shape))
        elif k.endswith("beta"):
            args[k] = mx.nd.array(rng.uniform(-0.05, 0.05, args[k].shape))


def _seeded_init_class() -> Any:
    import mxnet as mx

    class SeededInit(mx.init.Xavier):
        """Xavier for matrices and kernels; a small uniform for vectors and unnamed kinds
        (Xavier refuses 1-D weights, which some GluonCV blocks have)."""

        def __init__(self) -> None:
            super().__init__(magnitude=1.0)

        def _init_weight(self, name: Any, arr: Any) -> None:
            if len(arr.shape) < 2:
                arr[:] = mx.nd.random.uniform(-0.05, 0.05, arr.shape)
            else:
                super()._init_weight(name, arr)

        def _init_default(self, name: Any, arr: Any) -> None:
            arr[:] = mx.nd.random.uniform(-0.05, 0.05, arr.shape)

    return SeededInit


def _SeededInit() -> Any:
    return _seeded_init_class()()


def _init(net: Any, seed: int) -> None:
    import mxnet as mx

    mx.random.seed(seed)
    np.random.seed(seed)
    net.initialize(_SeededInit(), force_reinit=True)


def gluoncv_model(name: str, kind: str, size: Tuple[int, int], seed: int = 0, batch: int = 1,
                  video: int = 0, **kwargs: Any) -> Model:
    """A GluonCV model by zoo name at image size ``size`` (H, W); ``video`` frames for 3-D nets."""
    import mxnet as mx
    from gluoncv import model_zoo

    net = model_zoo.get_model(name, pretrained=False, pretrained_base=False, **kwargs)
    _init(net, seed)
    shape = (batch, 3) + ((video,) if video else ()) + tuple(size)
    x = np.random.RandomState(seed + 1).uniform(-1, 1, shape).astype("float32")
    sym, args, aux = _export(net, [mx.nd.array(x)], seed)
    return Model(name, sym, args, aux, {"data": shape}, {"data": "float32"}, {"data": x}, kind)


def _spread(model: Model, weight: str, rows: np.ndarray, factor: float, rng: np.random.RandomState) -> None:
    """Scale the ``rows`` (output channels) of ``weight`` by ``factor`` and spread their biases over [-2, 2]."""
    import mxnet as mx

    bias = weight[:-len("weight")] + "bias"
    w, b = model.args[weight].asnumpy(), model.args[bias].asnumpy()
    w[rows] *= factor
    b[rows] += rng.uniform(-2, 2, int(rows.sum()))
    model.args[weight], model.args[bias] = mx.nd.array(w), mx.nd.array(b)
    model.params = {**model.args, **model.aux}


def spread_scores(model: Model, factor: float = 100.0, seed: int = 0) -> Model:
    """Make a random detector's score logits spread out (in place; returns ``model``).

    With random weights those logits barely differ: the top 400 of 20,160 scores of
    YOLOv3-MobileNet at 128x128 lie within 1e-6 of each other (307 of 399 gaps), so
    float rounding alone reorders them and MXNet's own box_nms, fed native and
    accelerated inputs, keeps 84 of the same 100 boxes. Scaling the channels that
    become scores (YOLOv3: objectness and classes of each output convolution, not the
    4 box channels of every anchor; Faster R-CNN: the RPN's objectness and the class
    head) and spreading their biases separates the scores, so that detections compare
    meaningfully. The graph is unchanged.
    """
    rng = np.random.RandomState(seed)
    for k in sorted(model.args):
        if "yolooutput" in k and k.endswith("conv0_weight"):
            n = model.args[k].shape[0]
            _spread(model, k, np.arange(n) % (n // 3) >= 4, factor, rng)
        elif k in ("fasterrcnn0_rpn0_conv1_weight", "fasterrcnn0_dense0_weight"):
            _spread(model, k, np.ones(model.args[k].shape[0], bool), factor, rng)
    return model


def bert_model(name: str = "bert_12_768_12", seq_len: int = 32, batch: int = 1, seed: int = 0,
               vocab_size: int = 1000) -> Model:
    """GluonNLP BERT (or RoBERTa) encoder with pooler, random weights, a small vocabulary."""
    import gluonnlp as nlp
    import mxnet as mx

    vocab = nlp.Vocab({f"w{i}": 1 for i in range(vocab_size - 4)})
    net, _ = nlp.model.get_model(name, dataset_name=None, vocab=vocab, pretrained=False, use_pooler=True,
                                 use_decoder=False, use_classifier=False)
    _init(net, seed)
    rng = np.random.RandomState(seed + 1)
    tokens = rng.randint(0, len(vocab), (batch, seq_len)).astype("float32")
    segments = rng.randint(0, 2, (batch, seq_len)).astype("float32")
    valid = np.full((batch,), seq_len - 3, dtype="float32")
    inputs = {"data0": tokens, "data1": segments, "data2": valid}
    sym, args, aux = _export(net, [mx.nd.array(tokens), mx.nd.array(segments), mx.nd.array(valid)], seed)
    shapes = {k: v.shape for k, v in inputs.items()}
    return Model(name, sym, args, aux, shapes, {k: "float32" for k in inputs}, inputs, "nlp")


#: The suite's models at small sizes: name -> builder.
MODELS: Dict[str, Callable[[], Model]] = {
    "ssd_resnet50": lambda: gluoncv_model("ssd_512_resnet50_v1_voc", "detection", (128, 128)),
    "ssd_mobilenet": lambda: gluoncv_model("ssd_512_mobilenet1.0_voc", "detection", (128, 128)),
    "yolo3_darknet53": lambda: spread_scores(gluoncv_model("yolo3_darknet53_voc", "detection", (128, 128))),
    "yolo3_mobilenet": lambda: spread_scores(gluoncv_model("yolo3_mobilenet1.0_voc", "detection", (128, 128))),
    "faster_rcnn": lambda: spread_scores(gluoncv_model("faster_rcnn_resnet50_v1b_voc", "detection", (128, 128))),
    "fcn": lambda: gluoncv_model("fcn_resnet50_voc", "segmentation", (128, 128), aux=False,
                                 base_size=128, crop_size=128),
    "psp": lambda: gluoncv_model("psp_resnet50_ade", "segmentation", (128, 128), aux=False,
                                 base_size=128, crop_size=128),
    "deeplab": lambda: gluoncv_model("deeplab_resnet50_ade", "segmentation", (128, 128), aux=False,
                                     base_size=128, crop_size=128),
    "simple_pose": lambda: gluoncv_model("simple_pose_resnet18_v1b", "pose", (128, 96)),
    "bert": lambda: bert_model(),
    "mask_rcnn": lambda: gluoncv_model("mask_rcnn_resnet18_v1b_coco", "detection", (256, 256)),
    "i3d": lambda: gluoncv_model("i3d_resnet50_v1_kinetics400", "video", (64, 64), video=8),
}


def transformer_model(seq_len: int = 12, batch: int = 2, seed: int = 0, vocab_size: int = 100, units: int = 64,
                      heads: int = 4, layers: int = 2) -> Model:
    """GluonNLP's Transformer encoder-decoder (``get_transformer_encoder_decoder``) with
    embeddings and an output projection, decoding a whole target sequence (teacher forcing)."""
    import mxnet as mx
    from gluonnlp.model.transformer import get_transformer_encoder_decoder
    from mxnet.gluon import HybridBlock, nn

    class Seq2Seq(HybridBlock):
        def __init__(self) -> None:
            super().__init__(prefix="seq2seq_")
            with self.name_scope():
                self.encoder, self.decoder, _ = get_transformer_encoder_decoder(
                    num_layers=layers, num_heads=heads, units=units, hidden_size=4 * units, dropout=0.1,
                    max_src_length=64, max_tgt_length=64, prefix="transformer_")
                self.src_embed = nn.Embedding(vocab_size, units)
                self.tgt_embed = nn.Embedding(vocab_size, units)
                self.proj = nn.Dense(vocab_size, flatten=False)

        def hybrid_forward(self, F: Any, src: Any, tgt: Any, src_len: Any, tgt_len: Any) -> Any:
            memory, _ = self.encoder(self.src_embed(src), None, src_len)
            steps = F.contrib.arange_like(src, axis=1)
            mem_mask = F.broadcast_lesser(F.reshape(steps, shape=(1, -1)), F.reshape(src_len, shape=(-1, 1)))
            out, _, _ = self.decoder(self.tgt_embed(tgt), [memory, mem_mask], tgt_len)
            return self.proj(out)

    net = Seq2Seq()
    _init(net, seed)
    rng = np.random.RandomState(seed + 1)
    inputs = {
        "data0": rng.randint(0, vocab_size, (batch, seq_len)).astype("float32"),
        "data1": rng.randint(0, vocab_size, (batch, seq_len)).astype("float32"),
        "data2": np.array([seq_len - 3 * i for i in range(batch)], dtype="float32"),
        "data3": np.array([seq_len - 1 - 2 * i for i in range(batch)], dtype="float32"),
    }
    sym, args, aux = _export(net, [mx.nd.array(v) for v in inputs.values()], seed)
    shapes = {k: v.shape for k, v in inputs.items()}
    return Model("transformer", sym, args, aux, shapes, {k: "float32" for k in inputs}, inputs, "nlp")


MODELS["transformer"] = lambda: transformer_model()
