"""A word-level trigram language model (see examples/train_genai_models.py) that streams its tokens."""

import os
import re

import numpy as np
import triton_python_backend_utils as pb_utils

TOKEN_PATTERN = re.compile(r"[a-z_][a-z0-9_]*(?:'[a-z]+)?|[0-9]+|[^\sa-z0-9_]")
NO_SPACE_BEFORE = set(".,;:!?)]}")
NO_SPACE_AFTER = set("([{")
UNK, EOS = 0, 1
MAX_TOKENS = 4096
# Interpolation weights of the trigram, bigram and unigram estimates.
WEIGHTS = (0.6, 0.3, 0.1)


class TritonPythonModel:
    def initialize(self, args):
        data = np.load(os.path.join(os.path.dirname(__file__), "ngram.npz"))
        self.vocab = [str(w) for w in data["vocab"]]
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.v = v = len(self.vocab)
        unigram = data["unigram"].astype(np.float64)
        unigram[[UNK, EOS]] = 0
        self.unigram = unigram / unigram.sum()
        keys = data["bigram_keys"].astype(np.int64)
        self.bi_ctx, self.bi_next = keys // v, keys % v
        self.bi_counts = data["bigram_counts"].astype(np.float64)
        keys = data["trigram_keys"].astype(np.int64)
        self.tri_ctx, self.tri_next = keys // v, keys % v
        self.tri_counts = data["trigram_counts"].astype(np.float64)

    def tokenize(self, text):
        return [self.index.get(t, UNK) for t in TOKEN_PATTERN.findall(text.lower())]

    def text_of(self, token, previous):
        word = self.vocab[token]
        if previous is None or word in NO_SPACE_BEFORE or self.vocab[previous] in NO_SPACE_AFTER:
            return word
        return " " + word

    def distribution(self, u, v):
        """P(next | u, v): the trigram, bigram and unigram estimates mixed, over the contexts that were seen."""
        parts = [(WEIGHTS[2], self.unigram)]
        for weight, ctx, nxt, counts, key in (
            (WEIGHTS[1], self.bi_ctx, self.bi_next, self.bi_counts, v),
            (WEIGHTS[0], self.tri_ctx, self.tri_next, self.tri_counts, None if u is None else u * self.v + v),
        ):
            if key is None:
                continue
            lo, hi = np.searchsorted(ctx, key), np.searchsorted(ctx, key, side="right")
            if hi > lo:
                p = np.zeros(self.v)
                p[nxt[lo:hi]] = counts[lo:hi]
                p[UNK] = 0
                if p.sum() > 0:
                    parts.append((weight, p / p.sum()))
        total = sum(w for w, _ in parts)
        return sum(w * p for w, p in parts) / total

    @staticmethod
    def sample(p, rng, temperature, top_p, top_k):
        if temperature <= 0:
            return int(np.argmax(p))
        p = p ** (1.0 / temperature)
        order = np.argsort(-p, kind="stable")
        if top_k > 0:
            order = order[:top_k]
        kept = p[order] / p[order].sum()
        if 0 < top_p < 1:
            cut = int(np.searchsorted(np.cumsum(kept), top_p)) + 1
            order, kept = order[:cut], kept[:cut] / kept[:cut].sum()
        return int(order[rng.choice(len(order), p=kept)])

    def execute(self, requests):
        for request in requests:
            self.generate(request)
        return None

    def generate(self, request):
        def value(name, default):
            t = pb_utils.get_input_tensor_by_name(request, name)
            return default if t is None else t.as_numpy().reshape(-1)[0]

        sender = request.get_response_sender()
        prompt = value("text_input", b"").decode("utf-8")
        max_tokens = int(value("max_tokens", 16))
        stream = bool(value("stream", False))
        temperature = float(value("temperature", 1.0))
        top_p = float(value("top_p", 1.0))
        top_k = int(value("top_k", 0))
        seed = value("seed", None)
        if max_tokens < 0 or max_tokens > MAX_TOKENS:
            error = pb_utils.TritonError(
                f"max_tokens is {max_tokens}, expected 0 to {MAX_TOKENS}", pb_utils.TritonError.INVALID_ARG
            )
            sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        rng = np.random.default_rng(None if seed is None else int(seed))
        context = self.tokenize(prompt)
        n_in = len(context)
        u = context[-2] if len(context) >= 2 else None
        v = context[-1] if context else EOS
        previous = context[-1] if context else None
        pieces = []

        def respond(text, count, final):
            outputs = [
                pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_)),
                pb_utils.Tensor("num_input_tokens", np.array([n_in], dtype=np.int32)),
                pb_utils.Tensor("num_output_tokens", np.array([count], dtype=np.int32)),
            ]
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs), flags=flags)

        produced = 0
        for _ in range(max_tokens):
            if request.is_cancelled():
                break
            token = self.sample(self.distribution(u, v), rng, temperature, top_p, top_k)
            if token == EOS:
                break
            text = self.text_of(token, previous)
            produced += 1
            u, v, previous = v, token, token
            if stream:
                respond(text, 1, False)
            else:
                pieces.append(text)
        # The final flag rides on a last response: the whole text, or an empty one after streaming.
        respond("" if stream else "".join(pieces), 0 if stream else produced, True)
