"""ONNX BERT-family models without torch: `build` (and `checkpoint`, `graph`) writes a model folder from a
safetensors checkpoint and needs the `onnx` package; `runtime` runs one with onnxruntime and tokenizers
only. `layout` names the folder's files and is all the two sides share, so a session that only runs a
model never imports `onnx`.
"""
