#!/usr/bin/env python3
"""How often a chat model names what it was asked for: for words and Bible references of a round's
dialogues (OUT/data/chat.jsonl, from chat_data.py --headword/--reference as-asked), ask the model
greedily ("What is a {word}?", "What does {reference} say?") and count the replies that carry the
asked word or reference in the trained form ("In The Devil's Dictionary, {word} (", "In the King
James Bible, {reference} reads"). Trained and held-out items are counted apart: a trained item can
be recalled, a held-out one only copied from the question.

  python3 tools/train/chat_probe.py --model OUT/kinfer-demo.gguf --chat OUT/data/chat.jsonl --json OUT/probe.json
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess

DEF = re.compile(r"In The Devil's Dictionary, (.+?) \(")
REF = re.compile(r"In the King James Bible, (.+?) reads: ")


def items(chat: str):
    """{(kind, split): sorted set of words / references} from the replies of the dialogues."""
    out: dict = {}
    for line in open(chat, encoding="utf-8"):
        r = json.loads(line)
        text = "".join(s[0] for s in r["segments"])
        for kind, rx in (("devil", DEF), ("bible", REF)):
            for m in rx.finditer(text):
                out.setdefault((kind, r["split"]), set()).add(m.group(1))
    return {k: sorted(v) for k, v in out.items()}


def ask(kinfer: str, model: str, question: str, threads: int) -> str:
    cmd = [kinfer, "run", "-m", model, "--chat", "-p", question, "--temp", "0", "-n", "160", "-t", str(threads)]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--chat", required=True, help="the round's data/chat.jsonl")
    ap.add_argument("--kinfer", default="build/bin/kinfer")
    ap.add_argument("--n", type=int, default=40, help="items asked per kind and split")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7, help="which items are drawn")
    ap.add_argument("--json", help="write the counts and the replies here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    result, replies = {}, []
    for (kind, split), pool in sorted(items(args.chat).items()):
        pick = rng.sample(pool, min(args.n, len(pool)))
        hits = 0
        for it in pick:
            if kind == "devil":
                q, want = f"What is a {it}?", f"In The Devil's Dictionary, {it} ("
            else:
                q, want = f"What does {it} say?", f"In the King James Bible, {it} reads: "
            a = ask(args.kinfer, args.model, q, args.threads)
            hits += want in a
            replies.append({"kind": kind, "split": split, "question": q, "named": want in a, "reply": a})
        result[f"{kind}_{split}"] = [hits, len(pick)]
        print(f"chat_probe: {kind} {split}: {hits} / {len(pick)} replies name what was asked")
    if args.json:
        json.dump({"model": args.model, "counts": result, "replies": replies}, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
