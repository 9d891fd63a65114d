#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets added for issue 20 (tests/fuzz/corpus/<target>/),
from the shipped test data: small valid files of each format plus a few near misses. Run from the
repository root: python3 tests/fuzz/make_corpus.py (deterministic; the output is committed)."""
import json, os, struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
C = os.path.join(ROOT, "tests", "fuzz", "corpus")
DATA = os.path.join(ROOT, "tests", "data")


def out(target, name, data):
    d = os.path.join(C, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# routing traces: "kinfer-routing-trace 1", sizes, then "t l e1 .. eK" per token and layer
def trace(layers, experts, k, tokens):
    s = "kinfer-routing-trace 1\nlayers %d experts %d used %d tokens %d\n" % (layers, experts, k, tokens)
    for t in range(tokens):
        for l in range(layers):
            s += "%d %d %s\n" % (t, l, " ".join(str((t * 7 + l * 3 + j * 5) % experts) for j in range(k)))
    return s


out("routing_trace", "small", trace(2, 8, 2, 3))
out("routing_trace", "k3like", trace(7, 32, 4, 5))
out("routing_trace", "one", trace(1, 1, 1, 1))
out("routing_trace", "short", trace(2, 8, 2, 3)[:-8])

# expert profiles
def profile(layers, experts, rows):
    s = "kinfer-expert-profile 1\nlayers %d experts %d\n" % (layers, experts)
    for l in rows:
        s += "%d %s\n" % (l, " ".join(str((l * 13 + e * 7) % 50) for e in range(experts)))
    return s


out("expert_profile", "small", profile(3, 4, [0, 2]))
out("expert_profile", "k3like", profile(8, 32, range(1, 8)))
out("expert_profile", "empty", profile(2, 2, []))
out("expert_profile", "big_count", "kinfer-expert-profile 1\nlayers 1 experts 2\n0 18446744073709551615 1\n")

# layer profiles (`kinfer bench --layer-times`): the shipped tiny models' layer counts and
# fingerprints (Model::fingerprint, as the bench writes them), so the seeds pass the model check
def layer_profile(layers, fingerprint, name, values=None):
    s = "kinfer-layer-profile 1\nlayers %d fingerprint %s model %s\nmeasured threads 1 prompt 128 batch 64 decode 32\n" % (
        layers, fingerprint, name)
    s += "# layer  decode-ns-per-token  prefill-ns-per-token\n"
    for l in range(layers + 1):
        d, p = values(l) if values else (20000 + 1000 * l, 10000 + 500 * l)
        s += "%s %d %d\n" % ("head" if l == layers else str(l), d, p)
    return s


K3_FP, KL_FP = "f5ea1c83d709d15e", "22c676bc98efff84"
out("layer_profile", "k3", layer_profile(8, K3_FP, "k3-tiny-a-Q4_K_M.gguf"))
out("layer_profile", "kl", layer_profile(7, KL_FP, "kl-tiny-a-Q4_K_M.gguf"))
out("layer_profile", "k3_zeros", layer_profile(8, K3_FP, "k3.gguf", lambda l: (0, 0)))
out("layer_profile", "k3_max", layer_profile(8, K3_FP, "k3.gguf", lambda l: (10 ** 12, 10 ** 12 - l)))
out("layer_profile", "one_layer", layer_profile(1, "0000000000000000", "x"))
out("layer_profile", "short", layer_profile(8, K3_FP, "k3.gguf")[:-12])

# KL-divergence base files: "KINFKLD1" n_ctx n_vocab n_chunk 0 fnv1a64(tokens) tokens records
def fnv(tokens):
    h = 1469598103934665603
    for t in tokens:
        for b in struct.pack("<i", t):
            h ^= b
            h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def kld(n_ctx, n_vocab, n_chunk, records=True):
    toks = [(i * 37) % n_vocab for i in range(n_ctx * n_chunk)]
    b = b"KINFKLD1" + struct.pack("<IIIIQ", n_ctx, n_vocab, n_chunk, 0, fnv(toks)) + struct.pack("<%di" % len(toks), *toks)
    if records:
        n = n_chunk * (n_ctx - 1 - n_ctx // 2) * n_vocab
        b += bytes((i * 11) & 0xFF for i in range(2 * n))
    return b


out("kld_base", "small", kld(8, 16, 2))
out("kld_base", "no_records", kld(8, 16, 2, False))
out("kld_base", "one_chunk", kld(4, 5, 1))

# tiktoken rank files: the shipped tiny vocabulary's first ranks
ranks = open(os.path.join(DATA, "text", "kimi_tiny.tiktoken.model"), "rb").read().split(b"\n")
out("tiktoken", "ranks300", b"\n".join(ranks[:300]) + b"\n")
out("tiktoken", "ranks1024", b"\n".join(ranks[:1024]) + b"\n")
out("tiktoken", "gap", b"\n".join(ranks[:10] + ranks[20:40]) + b"\n")

# chat: <template> \0 <format name> \0 <flags> <messages: role \x1f content \x1f reasoning \x1f name, \x1e between>
conv = "\x1e".join(["system\x1fBe brief.\x1f\x1f", "user\x1fHi there\x1f\x1f", "assistant\x1fHello!\x1fthinking\x1f",
                    "tool\x1f{\"x\": 1}\x1f\x1fget_x", "user\x1fand now?\x1f\x1f"])
for name, fmt in (("Kimi-K3.jinja", "kimi-k3"), ("Kimi-K2-Instruct.jinja", "kimi-k2")):
    t = open(os.path.join(DATA, "text", name), encoding="utf-8").read()
    out("chat", fmt, t + "\0" + fmt + "\0\x87" + conv)
out("chat", "empty_template", "\0xtml\0\x03user\x1fhi")
out("chat", "reply_k3", "\0k3\0\x02<|close|>think<|sep|><|open|>response<|sep|>answer<|close|>response<|sep|>")

# vocabularies: vocab-only GGUFs (the tokenizer keys of the shipped model, the first ranks only)
def gguf_kv(path):
    b = open(path, "rb").read()
    p = [24]
    n_kv = struct.unpack_from("<Q", b, 16)[0]

    def rd(fmt):
        v = struct.unpack_from(fmt, b, p[0])
        p[0] += struct.calcsize(fmt)
        return v[0]

    def rstr():
        n = rd("<Q")
        s = b[p[0]:p[0] + n]
        p[0] += n
        return s

    sizes = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def val(t):
        if t == 8:
            return rstr()
        if t == 9:
            et = rd("<I")
            n = rd("<Q")
            return (et, [val(et) for _ in range(n)])
        return rd(sizes[t])

    kv = []
    for _ in range(n_kv):
        k = rstr().decode()
        t = rd("<I")
        kv.append((k, t, val(t)))
    return kv


def wstr(s):
    s = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(s)) + s


def wval(t, v):
    sizes = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    if t == 8:
        return wstr(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(wval(et, x) for x in items)
    return struct.pack(sizes[t], v)


def gguf(kvs):
    b = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for k, t, v in kvs:
        b += wstr(k) + struct.pack("<I", t) + wval(t, v)
    return b


for arch in ("k3", "kl"):
    kv = gguf_kv(os.path.join(DATA, "models", "%s-tiny-a-Q4_K_M.gguf" % arch))
    tok = {k: (t, v) for k, t, v in kv if k.startswith("tokenizer.")}
    n = 512
    toks = tok["tokenizer.ggml.tokens"][1][1]
    types = tok["tokenizer.ggml.token_type"][1][1]
    merges = tok["tokenizer.ggml.merges"][1][1]
    spec = list(range(4096, 4096 + 16))
    keep_t = toks[:n] + [toks[i] for i in spec]
    keep_ty = types[:n] + [types[i] for i in spec]
    remap = lambda i: i if i < n else n + (i - 4096)
    kvs = [("general.architecture", 8, b"kimi-k3" if arch == "k3" else b"kimi-linear")]
    for k, (t, v) in tok.items():
        if k == "tokenizer.ggml.tokens":
            v = (8, keep_t)
        elif k == "tokenizer.ggml.token_type":
            v = (v[0], keep_ty)
        elif k == "tokenizer.ggml.merges":
            v = (8, merges[:n - 256])
        elif k.endswith("_token_id"):
            v = remap(v) if v >= 4096 and v < 4096 + 16 else 0
        elif k == "tokenizer.chat_template":
            v = v[:2000]
        kvs.append((k, t, v))
    out("vocab", arch + "_512", gguf(kvs))
    out("vocab", arch + "_no_merges", gguf([x for x in kvs if x[0] != "tokenizer.ggml.merges"]))

# HF config / index JSON: <config.json> \0 <model.safetensors.index.json>
G = os.path.join(os.path.dirname(ROOT), "shared", "golden", "hf")
idx = json.dumps({"metadata": {"total_size": 24}, "weight_map": {
    "language_model.model.embed_tokens.weight": "model-00001-of-00001.safetensors",
    "language_model.model.norm.weight": "model-00001-of-00001.safetensors"}})
for m in ("hf-k3-tiny", "hf-kl-tiny"):
    p = os.path.join(G, m, "config.json")
    if os.path.exists(p):
        cfg = open(p).read()
        out("hf_config", m, cfg + "\0" + idx)
        out("hf_config", m + "_no_index", cfg)
out("hf_config", "bad_shard", "{}\0" + json.dumps({"weight_map": {"a": "../x.safetensors"}}))

# Model::load: byte 0 picks k3 / kl, then 8-byte edits (op, sel, u16 index, i32 value)
edit = lambda op, sel, idx, val: struct.pack("<BBHi", op, sel, idx, val)
out("model_load", "k3", b"\x00")
out("model_load", "kl", b"\x01")
out("model_load", "k3_ne", b"\x00" + edit(2, 1, 3, 100))
out("model_load", "kl_kv", b"\x01" + edit(0, 0, 5, 3) + edit(7, 0, 9, 4))
out("model_load", "k3_drop", b"\x00" + edit(4, 0, 40, 0))

# Session::load_state: byte 0 (bit 0 model, bit 1 keep the damaged checksum, bit 2 raw file), then
# 6-byte edits (op, value, u32 offset): 0 set a byte, 1 truncate, 2 append, 3 add to a u32
sedit = lambda op, val, off: struct.pack("<BBI", op, val, off)
out("session_state", "k3", b"\x00")
out("session_state", "kl", b"\x01")
out("session_state", "k3_byte", b"\x00" + sedit(0, 0x41, 40))
out("session_state", "kl_trunc", b"\x01" + sedit(1, 0, 200))
out("session_state", "k3_count", b"\x00" + sedit(3, 1, 24) + sedit(3, 0xff, 60))
out("session_state", "k3_badsum", b"\x02" + sedit(0, 0, 100))
out("session_state", "raw", b"\x04KINFSES\x00\x03\x00\x00\x00")
