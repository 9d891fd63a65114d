#!/usr/bin/env python3
"""Byte-level BPE for the Kimi tokenizer family: pre-tokenizer, rank-based encoder, trainer, and
writers for tiktoken.model (base64 token + rank per line) and a K3-layout tokenizer_config.json.

Pre-tokenizer. Kimi's pattern (tokenization_kimi.py, quoted in shared/golden/llama.cpp/README.md §2) is
    [\\p{Han}]+
  | [^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
  | [^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
  | \\p{N}{1,3}
  |  ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*
  | \\s*[\\r\\n]+
  | \\s+(?!\\S)
  | \\s+
Python's `re` has no \\p{..} classes and no class intersection, so the classes are built here as
explicit code-point ranges from `unicodedata` general categories (Python's Unicode version), with
these approximations (documented; they do not matter for the English training corpora):
  * \\p{Han} is approximated by the CJK ideograph / radical blocks listed in HAN_RANGES (the Han
    *script* property is not available in unicodedata);
  * \\s is the Unicode White_Space set (listed in WHITE_SPACE);
  * category tables follow the Python build's Unicode version, not necessarily the regex crate's.
On the golden tokenizer cases (shared/golden/llama.cpp/tokenizer) with the cl100k 4096-rank vocab
this pre-tokenizer + encoder reproduces llama.cpp's ids exactly (see `--selftest`).
"""
from __future__ import annotations

import argparse
import base64
import collections
import heapq
import json
import os
import re
import sys
import unicodedata

HAN_RANGES = [(0x2E80, 0x2E99), (0x2E9B, 0x2EF3), (0x2F00, 0x2FD5), (0x3005, 0x3005), (0x3007, 0x3007),
              (0x3021, 0x3029), (0x3038, 0x303B), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFA6D),
              (0xFA70, 0xFAD9), (0x16FE2, 0x16FE3), (0x16FF0, 0x16FF1), (0x20000, 0x2A6DF), (0x2A700, 0x2B739),
              (0x2B740, 0x2B81D), (0x2B820, 0x2CEA1), (0x2CEB0, 0x2EBE0), (0x2EBF0, 0x2EE5D), (0x2F800, 0x2FA1D),
              (0x30000, 0x3134A), (0x31350, 0x323AF)]
WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]


def _esc(cp: int) -> str:
    return f"\\U{cp:08x}"


def _ranges_to_class(ranges) -> str:
    return "".join(_esc(a) if a == b else f"{_esc(a)}-{_esc(b)}" for a, b in ranges)


def _ranges(pred) -> list:
    out, start, prev = [], None, None
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            ok = False
        else:
            ok = pred(cp)
        if ok:
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            out.append((start, prev))
            start = None
    if start is not None:
        out.append((start, prev))
    return out


def build_pattern() -> re.Pattern:
    han = set()
    for a, b in HAN_RANGES:
        han.update(range(a, b + 1))
    cat = [unicodedata.category(chr(c)) if not 0xD800 <= c <= 0xDFFF else "Cs" for c in range(0x110000)]
    L = _ranges_to_class(_ranges(lambda c: cat[c][0] == "L"))
    N = _ranges_to_class(_ranges(lambda c: cat[c][0] == "N"))
    UP = _ranges_to_class(_ranges(lambda c: (cat[c] in ("Lu", "Lt", "Lm", "Lo") or cat[c][0] == "M") and c not in han))
    LO = _ranges_to_class(_ranges(lambda c: (cat[c] in ("Ll", "Lm", "Lo") or cat[c][0] == "M") and c not in han))
    HAN = _ranges_to_class(HAN_RANGES)
    WS = _ranges_to_class(WHITE_SPACE)
    contr = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    pre = f"[^\\r\\n{L}{N}]?"
    pat = "|".join([
        f"[{HAN}]+",
        f"{pre}[{UP}]*[{LO}]+{contr}",
        f"{pre}[{UP}]+[{LO}]*{contr}",
        f"[{N}]{{1,3}}",
        f" ?[^{WS}{L}{N}]+[\\r\\n]*",
        f"[{WS}]*[\\r\\n]+",
        f"[{WS}]+(?![^{WS}])",
        f"[{WS}]+",
    ])
    return re.compile(pat)


_PAT = None


def pretokenize(text: str) -> list[str]:
    global _PAT
    if _PAT is None:
        _PAT = build_pattern()
    return _PAT.findall(text)


# ----------------------------------------------------------------------------- BPE by rank

class Encoder:
    def __init__(self, ranks: dict[bytes, int]):
        self.ranks = ranks
        self.cache: dict[str, list[int]] = {}

    def _bpe(self, b: bytes) -> list[int]:
        if b in self.ranks:
            return [self.ranks[b]]
        parts = [b[i:i + 1] for i in range(len(b))]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        return [self.ranks[p] for p in parts]

    def encode(self, text: str) -> list[int]:
        out = []
        cache = self.cache
        for piece in pretokenize(text):
            ids = cache.get(piece)
            if ids is None:
                ids = self._bpe(piece.encode("utf-8"))
                if len(cache) < 2_000_000:
                    cache[piece] = ids
            out.extend(ids)
        return out


def load_tiktoken(path: str) -> dict[bytes, int]:
    ranks = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                tok, r = line.split()
                ranks[base64.b64decode(tok)] = int(r)
    return ranks


def save_tiktoken(path: str, vocab: list[bytes]) -> None:
    with open(path, "w") as f:
        for r, tok in enumerate(vocab):
            f.write(f"{base64.b64encode(tok).decode()} {r}\n")


# ----------------------------------------------------------------------------- trainer

def train_bpe(texts: list[str], n_ranks: int, log=print) -> list[bytes]:
    """Classic byte-level BPE on pre-tokens: ranks 0..255 are the bytes, then one rank per merge
    (most frequent adjacent pair; ties -> smallest (left id, right id)). Ranks are the merge order,
    so rank-based encoding (Encoder) reproduces the training segmentation."""
    counts = collections.Counter()
    for t in texts:
        counts.update(pretokenize(t))
    words = [list(w.encode("utf-8")) for w in counts]
    freqs = list(counts.values())
    vocab = [bytes([i]) for i in range(256)]
    pc = collections.defaultdict(int)
    where = collections.defaultdict(set)
    for wi, (w, f) in enumerate(zip(words, freqs)):
        for a, b in zip(w, w[1:]):
            pc[(a, b)] += f
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pc.items()]
    heapq.heapify(heap)
    log(f"tokenizer: {len(words)} distinct pre-tokens, {sum(freqs)} in all")
    while len(vocab) < n_ranks and heap:
        negc, pair = heapq.heappop(heap)
        if pc.get(pair, 0) != -negc or negc == 0:
            continue
        new = len(vocab)
        vocab.append(vocab[pair[0]] + vocab[pair[1]])
        touched = {}
        for wi in list(where.pop(pair, ())):
            w, f = words[wi], freqs[wi]
            # does the pair still occur?
            i, merged, found = 0, [], False
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    merged.append(new)
                    i += 2
                    found = True
                else:
                    merged.append(w[i])
                    i += 1
            if not found:
                continue
            for a, b in zip(w, w[1:]):
                pc[(a, b)] -= f
                touched[(a, b)] = True
            for a, b in zip(merged, merged[1:]):
                pc[(a, b)] += f
                where[(a, b)].add(wi)
                touched[(a, b)] = True
            words[wi] = merged
        pc.pop(pair, None)
        for p in touched:
            c = pc.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            elif p in pc:
                del pc[p]
        if len(vocab) % 512 == 0:
            log(f"tokenizer: {len(vocab)} ranks")
    return vocab


# ----------------------------------------------------------------------------- special tokens (K3 layout)

K3_SPECIALS = {0: ("[BOS]", True), 1: ("[EOS]", True), 2: ("<|end_of_msg|>", True), 3: ("<|open|>", False),
               4: ("<|close|>", False), 5: ("<|sep|>", False), 6: ("[start_header_id]", True),
               7: ("[end_header_id]", True), 9: ("[EOT]", True), 18: ("<|media_begin|>", True),
               19: ("<|media_content|>", True), 20: ("<|media_end|>", True), 21: ("<|media_pad|>", True),
               65: ("<osagent_mode>", True), 254: ("[UNK]", True), 255: ("[PAD]", True)}


def special_tokens(n_ranks: int) -> dict[str, int]:
    """All 256 slots after the ranks: K3 names, else <|reserved_token_{id}|>."""
    out = {}
    for off in range(256):
        name = K3_SPECIALS[off][0] if off in K3_SPECIALS else f"<|reserved_token_{n_ranks + off}|>"
        out[name] = n_ranks + off
    return out


def tokenizer_config(n_ranks: int) -> dict:
    dec = {}
    for off, (name, special) in sorted(K3_SPECIALS.items()):
        dec[str(n_ranks + off)] = {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                                   "single_word": False, "special": special}
    return {"added_tokens_decoder": dec, "additional_special_tokens": ["<|end_of_msg|>"],
            "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
            "bos_token": "[BOS]", "clean_up_tokenization_spaces": False, "eos_token": "[EOS]",
            "extra_special_tokens": {}, "model_max_length": 1048576, "pad_token": "[PAD]",
            "tokenizer_class": "TikTokenTokenizer", "unk_token": "[UNK]"}


def selftest(golden: str) -> int:
    ranks = load_tiktoken(os.path.join(golden, "hf", "hf-k3-tiny", "tiktoken.model"))
    enc = Encoder(ranks)
    d = json.load(open(os.path.join(golden, "llama.cpp", "tokenizer", "tokenizer_k3_vocab.json")))
    bad = 0
    for c in d["cases"]:
        text = bytes.fromhex(c["text_hex"]).decode("utf-8")
        got = enc.encode(text)
        if got != c["ids"]:
            bad += 1
            print(f"MISMATCH {c['name']}: {got[:20]} vs {c['ids'][:20]}")
    gpl = open(os.path.join(golden, "llama.cpp", "perplexity", "gpl-3.txt"), encoding="utf-8").read()
    ref = [int(x) for x in re.findall(r"\d+", open(os.path.join(golden, "llama.cpp", "tokenizer", "gpl-3.k3_vocab.llama-tokenize.ids.txt")).read())]
    got = enc.encode(gpl)
    if got != ref:
        bad += 1
        print(f"MISMATCH gpl-3: {len(got)} vs {len(ref)} ids")
    print(f"tokenizer selftest: {len(d['cases'])} cases + gpl-3.txt, {bad} mismatches")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", metavar="GOLDEN_DIR", help="check against llama.cpp ids with the cl100k 4096 ranks")
    ap.add_argument("--train", nargs="+", metavar="TXT", help="training text files")
    ap.add_argument("--ranks", type=int, default=4096, help="number of BPE ranks (vocab = ranks + 256 specials)")
    ap.add_argument("--out", help="output folder: tiktoken.model + tokenizer_config.json")
    args = ap.parse_args()
    if args.selftest:
        return selftest(args.selftest)
    texts = [open(p, encoding="utf-8", errors="replace").read() for p in args.train]
    vocab = train_bpe(texts, args.ranks)
    os.makedirs(args.out, exist_ok=True)
    save_tiktoken(os.path.join(args.out, "tiktoken.model"), vocab)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(len(vocab)), f, indent=2)
    print(f"tokenizer: wrote {len(vocab)} ranks + 256 special slots to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
