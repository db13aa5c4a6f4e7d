"""Sentence embeddings from word vectors (see examples/train_genai_models.py)."""

import os
import re

import numpy as np
import triton_python_backend_utils as pb_utils

TOKEN_PATTERN = re.compile(r"[a-z_][a-z0-9_]*(?:'[a-z]+)?|[0-9]+|[^\sa-z0-9_]")


class TritonPythonModel:
    def initialize(self, args):
        data = np.load(os.path.join(os.path.dirname(__file__), "vectors.npz"))
        self.index = {str(w): i for i, w in enumerate(data["vocab"])}
        self.vectors = data["vectors"].astype(np.float32)

    def embed(self, text):
        tokens = TOKEN_PATTERN.findall(text.lower())
        ids = [self.index[t] for t in tokens if t in self.index and self.index[t] > 1]
        if not ids:
            return np.zeros(self.vectors.shape[1], dtype=np.float32), len(tokens)
        mean = self.vectors[ids].mean(axis=0)
        norm = np.linalg.norm(mean)
        return (mean / norm if norm > 0 else mean).astype(np.float32), len(tokens)

    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
            rows = [self.embed(t.decode("utf-8")) for t in texts]
            embedding = np.stack([r[0] for r in rows]) if rows else np.zeros((0, self.vectors.shape[1]), np.float32)
            counts = np.array([r[1] for r in rows], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("embedding", embedding),
                        pb_utils.Tensor("num_input_tokens", counts),
                    ]
                )
            )
        return responses
