"""Run an ONNX file with ONNX Runtime in a process where ``mxnet`` (and ``mx_trt``) cannot be imported.

Usage: ``python mxfree_run.py MODEL.onnx INPUTS.npz OUTPUTS.npz``. A finder at the
front of ``sys.meta_path`` refuses both packages before anything else is imported;
the script checks that the refusal holds, runs the model on the arrays of
``INPUTS.npz`` (keyed by input name) and writes the outputs keyed by output name.
"""
import sys

BLOCKED = ("mxnet", "mx_trt")


class _Refuse:
    """A meta path finder that makes ``import mxnet`` and ``import mx_trt`` fail."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not importable in this process")
        return None


sys.meta_path.insert(0, _Refuse())


def main(model: str, inputs: str, outputs: str) -> None:
    for name in BLOCKED:
        try:
            __import__(name)
        except ImportError:
            continue
        raise SystemExit(f"{name} could be imported: the check is void")
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with np.load(inputs) as npz:
        feed = {k: npz[k] for k in npz.files}
    names = [o.name for o in session.get_outputs()]
    result = session.run(names, feed)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    if loaded:
        raise SystemExit(f"loaded {loaded}")
    np.savez(outputs, **dict(zip(names, result)))
    print("ran", model, "inputs", sorted(feed), "outputs", names)


if __name__ == "__main__":
    main(*sys.argv[1:4])
