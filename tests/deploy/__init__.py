"""The whole-model ONNX export, run where MXNet cannot be imported."""
