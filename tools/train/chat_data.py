#!/usr/bin/env python3
"""Chat dialogues for fine-tuning the demo model, made from the shipped corpora and rendered in
the Kimi K3 chat format exactly as `kinfer chat` renders it (src/text/chat_template.cpp).

Sources (the last 5 % of each source's items are held out, so held-out chat loss is measured on
questions the model never saw answered):
  - dict-devil.txt: "What is a cynic?" -> the Devil's Dictionary definition
  - kjv_bible.txt: "What does John 3:16 say?" -> the verse
  - fortunes_all.txt: a fortune's "Q:" -> its "A:"
  - a few fixed small-talk turns (greetings, "what can you do?")
With --devil-all no dictionary entry is held out: every entry is trained (the demo is asked for
definitions, and a 17 M model does not guess Bierce), each gets --devil-copies dialogues of its own
and the POPULAR words --popular-copies, and the held-out dialogues are Bible, fortune and small talk.
Each dialogue has one or two user turns, a short think block or an empty one, the thinking-effort
system message kinfer adds by default (or --no-think's form), and always ends its turn with
<|close|>message<|sep|><|end_of_msg|>.

Output: OUT/chat.jsonl, one dialogue per line: {"split", "source", "segments": [[text, is_target], ...]}.
Target segments are the assistant replies (what the loss is computed on; a number instead of true is
that segment's loss weight, see --copy-weight); every segment boundary sits next to a special token
or (the copied span) at a pre-token boundary, so tokenizing the segments one by one gives the same
ids as tokenizing the whole rendering.

  python3 tools/train/chat_data.py --corpora ../shared/corpora --out build-chat/data
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re

EFFORT_TEXT = ("`thinking_effort` guides on how much to think in your thinking channel (not including the "
               "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
               "Now the system is invoked with `thinking_effort={}`.")


def open_tag(tag: str, attrs=()) -> str:
    return "<|open|>" + tag + "".join(f' {k}="{v}"' for k, v in attrs) + "<|sep|>"


def close_tag(tag: str) -> str:
    return "<|close|>" + tag + "<|sep|>"


END_MSG = close_tag("message") + "<|end_of_msg|>"


def render(turns, thinking: bool, effort: str):
    """turns: [(question, think, answer, copied)]. Returns [[text, is_target]] as render_k3 lays it out;
    with --copy-weight, the copied span of an answer is a segment of its own whose target is that weight."""
    segs = []
    if thinking and effort:
        segs.append([open_tag("message", [("role", "system"), ("type", "thinking-effort")]) + EFFORT_TEXT.format(effort)
                     + END_MSG, False])
    for q, think, a, copied in turns:
        segs.append([open_tag("message", [("role", "user")]) + q + END_MSG + open_tag("message", [("role", "assistant")]), False])
        head = ""
        if thinking:
            head += open_tag("think") + (think if think.strip() else "") + close_tag("think")
        head += open_tag("response")
        tail = close_tag("response") + END_MSG
        cut = cut_copied(a, copied) if COPY_WEIGHT != 1.0 else None
        if cut:
            segs += [[head + cut[0], True], [cut[1], COPY_WEIGHT], [cut[2] + tail, True]]
        else:
            segs.append([head + a + tail, True])
    return segs


def cut_copied(a: str, copied: str):
    """(before, copied, after) around the first copied span of answer a, or None without one."""
    i = a.find(copied) if copied else -1
    return (a[:i], copied, a[i + len(copied):]) if i >= 0 else None


def first_sentences(text: str, limit: int) -> str:
    """Whole sentences up to about `limit` characters (at least one)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = -1
    for m in re.finditer(r"[.!?](\s|$)", text):
        if m.end() > limit and cut > 0:
            break
        cut = m.end()
    return text[:cut].strip() if cut > 0 else text[:limit].rsplit(" ", 1)[0] + "."


def devil_items(path: str, limit: int = 320):
    """(word, part of speech, definition) for each entry 'WORD, n.  Text...' of the dictionary."""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    items, cur = [], None
    head = re.compile(r"^([A-Z][A-Z' -]*[A-Z]), ([a-z]+\.(?: ?[a-z]+\.)*)\s+(.*)$")
    for ln in lines:
        m = head.match(ln)
        if m:
            if cur:
                items.append(cur)
            cur = [m.group(1), m.group(2), [m.group(3)]]
        elif cur is not None:
            if not ln.strip():   # the definition's first paragraph only (verse and quotes follow)
                items.append(cur)
                cur = None
            else:
                cur[2].append(ln)
    if cur:
        items.append(cur)
    out = []
    for w, pos, body in items:
        d = first_sentences(" ".join(body), limit)
        if len(d) >= 12:
            out.append((w, pos, d))
    return out


def bible_items(path: str):
    """(reference, verse text) for every verse."""
    book, chap, out, cur = None, None, [], None
    for ln in open(path, encoding="utf-8").read().split("\n"):
        m = re.match(r"^(\S.*) (\d+)$", ln)
        if m:
            book, chap = m.group(1), m.group(2)
            continue
        m = re.match(r"^  (\d+) (.*)$", ln)
        if m and book:
            if cur:
                out.append(cur)
            cur = [f"{book} {chap}:{m.group(1)}", m.group(2)]
        elif cur and ln.strip():
            cur[1] += " " + ln.strip()
    if cur:
        out.append(cur)
    return [(r, " ".join(t.split())) for r, t in out]


def fortune_items(path: str):
    """(question, answer) for the fortunes written as 'Q: ...' / 'A: ...'."""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("Q:"):
            q = [lines[i][2:].strip()]
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("A:", "Q:")):
                q.append(lines[j].strip())
                j += 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].startswith("A:"):
                a = [lines[j][2:].strip()]
                k = j + 1
                while k < len(lines) and lines[k].strip() and (lines[k][0].isspace() or len(a) < 4) \
                        and not lines[k].startswith("Q:"):
                    a.append(lines[k].strip())
                    k += 1
                qa = (" ".join(" ".join(q).split()).strip('"'), first_sentences(" ".join(a), 300).strip('"'))
                if 8 <= len(qa[0]) <= 200 and len(qa[1]) >= 3 and "\b" not in qa[0] + qa[1]:
                    out.append(qa)
                i = k
                continue
        i += 1
    return out


SMALL_TALK = [
    (["Hello", "Hello!", "Hi", "Hi there", "Good morning", "Hey"],
     "A greeting. Greet back and say what I can do.",
     ["Hello! I am a small demo model. Ask me what a word means, for a Bible verse, or a question from the fortune files.",
      "Hi! Ask me to define a word (for example: What is a cynic?) or to quote a verse (What does John 3:16 say?)."]),
    (["Who are you?", "What are you?", "What is your name?"],
     "The user asks who I am.",
     ["I am kinfer's demo model: a small Kimi K3 style model trained on the King James Bible, the fortune files and "
      "The Devil's Dictionary."]),
    (["What can you do?", "Help", "What do you know?"],
     "The user asks what I can do.",
     ["I can tell you what a word means in The Devil's Dictionary, quote a verse of the King James Bible, and answer a "
      "few questions from the fortune files."]),
    (["Thank you", "Thanks!", "Thanks"],
     "The user thanks me.",
     ["You are welcome.", "Glad to help."]),
]

# --talk greetings: round 2's model answered "What is a cynic?" with the fixed "What can you do?" reply
# (and the greeting that quotes that very question): such turns are kept out, and greetings get
# replies that name no example question.
GREETINGS = [
    (["Hello", "Hello!", "Hi", "Hi there", "Good morning", "Hey"],
     "A greeting. Greet back.",
     ["Hello! I am a small demo model.", "Hi! Good to see you."]),
    (["Thank you", "Thanks!", "Thanks"],
     "The user thanks me.",
     ["You are welcome.", "Glad to help."]),
]

DEVIL_Q = ["What is a {w}?", "What is {w}?", "What does {w} mean?", "Define {w}.", "What is the meaning of {w}?",
           "Tell me what {w} means.", "{W}?", "What does the word \"{w}\" mean?"]
DEVIL_T = ["The user asks for the meaning of \"{w}\". The Devil's Dictionary defines it.",
           "A definition of {w}, in Bierce's words.", "{W} is a {pos} in the Devil's Dictionary."]
BIBLE_Q = ["What does {r} say?", "Quote {r}.", "Recite {r}.", "What is {r}?", "Read me {r}.", "{r}"]
BIBLE_T = ["The user wants the verse {r} of the King James Bible.", "A Bible verse: {r}."]
FORT_T = ["A question from the fortune files.", "This one has a joke for an answer."]
POS = {"n.": "noun", "v.": "verb", "adj.": "adjective", "adv.": "adverb", "v.t.": "verb", "v.i.": "verb"}


# --headword as-asked: the word is spelt in the think block and the reply exactly as the question spells
# it, after a space ("What is a cynic?" -> "... cynic (n.): ..."), so the reply can copy the question's
# tokens; "Cynic (n.)" at the start of a reply is other tokens ("C", "yn", ...) than " cynic", and a small
# model that must learn that mapping per word answered with invented headwords instead (rounds 3, 4).
DEVIL_Q_ASKED = ["What is a {w}?", "What is {w}?", "What does {w} mean?", "Define {w}.", "What is the meaning of {w}?",
                 "Tell me what {w} means.", "What is meant by {w}?"]
DEVIL_T_ASKED = ["The user asks what {w} means. The Devil's Dictionary defines it.",
                 "A definition of {w}, in Bierce's words.", "The word {w} is a {pos} in the Devil's Dictionary."]
HEADWORD = "capitalized"
# --reference as-asked: the same for the Bible: "What does John 3:16 say?" -> "In the King James Bible,
# John 3:16 reads: ...", the reference after a space as in the question (a reply that starts with
# "John" has another first token than the question's " John"); the bare "{r}" question is dropped.
BIBLE_Q_ASKED = ["What does {r} say?", "Quote {r}.", "Recite {r}.", "What is {r}?", "Read me {r}."]
REFERENCE = "plain"
THINK_SHARE = 0.5
# --copy-weight: the loss weight of the tokens a reply copies from the question (the " cynic" of "In The
# Devil's Dictionary, cynic (n.): ..."). They are 2-3 of a definition's ~40 reply tokens, so at weight 1
# the copy is a small part of the loss and a short run learns the definitions' wording first (round 5:
# the right form under the wrong word). The span starts with a space and is followed by a space or
# punctuation, both pre-token boundaries, so the split does not change the ids (selftest.py checks it).
COPY_WEIGHT = 1.0


def make_turn(kind: str, item, rng: random.Random):
    if kind == "devil":
        w, pos, d = item
        lw = w.lower()
        if HEADWORD == "as-asked":
            q = rng.choice(DEVIL_Q_ASKED).format(w=lw)
            t = rng.choice(DEVIL_T_ASKED).format(w=lw, pos=POS.get(pos, "word"))
            return q, t, f"In The Devil's Dictionary, {lw} ({pos}): {d}", " " + lw
        q = rng.choice(DEVIL_Q).format(w=lw, W=lw.capitalize())
        t = rng.choice(DEVIL_T).format(w=lw, W=lw.capitalize(), pos=POS.get(pos, "word"))
        a = f"{w.capitalize()} ({pos}): {d}"
        return q, t, a, ""
    if kind == "bible":
        r, v = item
        if REFERENCE == "as-asked":
            return (rng.choice(BIBLE_Q_ASKED).format(r=r), rng.choice(BIBLE_T).format(r=r),
                    f"In the King James Bible, {r} reads: {v}", " " + r)
        return rng.choice(BIBLE_Q).format(r=r), rng.choice(BIBLE_T).format(r=r), f"{r}: {v}", ""
    if kind == "fortune":
        q, a = item
        return q, rng.choice(FORT_T), a, ""
    qs, t, answers = item
    return rng.choice(qs), t, rng.choice(answers), ""


# Words the README and the model card use as examples stay in the training split.
SHOWCASE = {"CYNIC", "LOVE", "HAPPINESS", "LAWYER", "POLITICS", "WAR"}
# With --devil-all, the words a new user is likely to ask about first get --popular-copies dialogues of
# their own, the other entries --devil-copies (all of them are trained; none is held out).
POPULAR = SHOWCASE | {"ABSURDITY", "BORE", "CONSERVATIVE", "EGOTIST", "MARRIAGE", "PEACE", "PRAY", "PATIENCE",
                      "PHILOSOPHY", "RELIGION", "DEBT", "FRIENDSHIP", "HOPE", "PAST", "FUTURE", "FAITH",
                      "POLITENESS", "ADMIRATION", "BRAIN", "DICTIONARY", "HISTORY", "LIAR", "MONEY", "PRESENT",
                      "WIT", "YEAR", "TRUTH", "CALAMITY"}


# --drill-share: copy drills. A 17 M model trained on the dialogues above learned the form of a
# definition but not to copy the asked word (rounds 5-8: chat_probe found it in 1 of 30 replies): the
# few hundred dictionary words can also be recalled, so nothing forces a copying mechanism. A drill
# asks for a word drawn from every word of the corpora (thousands, most of them not in the
# dictionary) and is cut right after the reply's first copy of it: the think block's "The user asks
# what WORD" or, without thinking, "In The Devil's Dictionary, WORD". The copied span has
# --copy-weight; nothing after it is trained, so a drill teaches the copy and nothing else.
DRILL_THINK = "The user asks what"
DRILL_ANSWER = "In The Devil's Dictionary,"


def drill_words(corpora: str):
    """Lower-case words of 3-14 letters seen at least 3 times in the corpora, sorted."""
    counts = {}
    for name in ("kjv_bible.txt", "fortunes_all.txt", "dict-devil.txt"):
        for w in re.findall(r"[a-z]{3,14}", open(os.path.join(corpora, name), encoding="utf-8", errors="replace").read()):
            counts[w] = counts.get(w, 0) + 1
    return sorted(w for w, c in counts.items() if c >= 3)


def drill_segments(word: str, rng: random.Random):
    """One copy drill in the layout render() gives: the prompt, then the reply cut after the copy."""
    r = rng.random()
    thinking, effort = (False, "") if r < 0.15 else (True, "max" if r < 0.8 else rng.choice(["low", "high"]))
    segs = []
    if thinking:
        segs.append([open_tag("message", [("role", "system"), ("type", "thinking-effort")]) + EFFORT_TEXT.format(effort)
                     + END_MSG, False])
    q = rng.choice(DEVIL_Q_ASKED).format(w=word)
    segs.append([open_tag("message", [("role", "user")]) + q + END_MSG + open_tag("message", [("role", "assistant")]), False])
    head = open_tag("think") + DRILL_THINK if thinking else open_tag("response") + DRILL_ANSWER
    return segs + [[head, True], [" " + word, COPY_WEIGHT]]


def split_items(items, frac: float, rng: random.Random):
    items = list(items)
    rng.shuffle(items)
    keep = [x for x in items if isinstance(x, tuple) and x[0] in SHOWCASE]
    rest = [x for x in items if not (isinstance(x, tuple) and x[0] in SHOWCASE)]
    n = max(1, int(len(rest) * frac))
    return rest[n:] + keep, rest[:n]


def _write(f, turns, kinds, rng: random.Random, split: str) -> None:
    # --think-share of the replies think briefly, the others leave the think block empty.
    turns = [(q, t if rng.random() < THINK_SHARE else "", a, c) for q, t, a, c in turns]
    r = rng.random()
    thinking, effort = (False, "") if r < 0.15 else (True, "max" if r < 0.8 else rng.choice(["low", "high"]))
    segs = render(turns, thinking, effort)
    f.write(json.dumps({"split": split, "source": "+".join(kinds), "segments": segs}, ensure_ascii=False) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", required=True, help="folder with dict-devil.txt, kjv_bible.txt, fortunes_all.txt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dialogues", type=int, default=12000, help="training dialogues to write")
    ap.add_argument("--heldout-frac", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--devil-all", action="store_true",
                    help="every dictionary entry is trained (none held out; the held-out dialogues are then Bible, "
                         "fortune and small talk only) and gets --devil-copies dialogues of its own, each phrased "
                         "at random, on top of the --dialogues mixed ones")
    ap.add_argument("--devil-copies", type=int, default=8, help="with --devil-all: dialogues per entry")
    ap.add_argument("--popular-copies", type=int, default=32, help="with --devil-all: dialogues per POPULAR word")
    ap.add_argument("--def-chars", type=int, default=320, help="definitions cut to whole sentences of about this length")
    ap.add_argument("--devil-weight", type=float, default=0.5, help="share of turns that are definitions (before "
                    "normalising with bible 0.3, fortune 0.12 and --talk-weight)")
    ap.add_argument("--talk-weight", type=float, default=0.08, help="share of turns that are small talk")
    ap.add_argument("--talk", choices=["all", "greetings"], default="all",
                    help="greetings: only the greeting and thanks turns, with replies that quote no example question (a "
                         "fixed reply that is trained often becomes the answer to everything the model is unsure of)")
    ap.add_argument("--headword", choices=["capitalized", "as-asked"], default="capitalized",
                    help="how a definition names its word: capitalized ('Cynic (n.): ...', rounds 1-4) or as-asked "
                         "(the question's spelling after a space, so the reply can copy its tokens)")
    ap.add_argument("--reference", choices=["plain", "as-asked"], default="plain",
                    help="how a verse names its reference: plain ('John 3:16: ...', rounds 1-5) or as-asked (after a "
                         "fixed opening, spelt as the question spells it)")
    ap.add_argument("--think-share", type=float, default=0.5,
                    help="share of the replies with a short think block (the others: an empty one); a think block "
                         "that names the asked word is a second, nearer place for the reply to copy it from")
    ap.add_argument("--drill-share", type=float, default=0.0,
                    help="copy drills written on top of --dialogues, as a share of them: a word of the corpora asked "
                         "for and the reply cut after its copy (0: none)")
    ap.add_argument("--copy-weight", type=float, default=1.0,
                    help="loss weight of the word or reference an as-asked reply copies from the question (1: as the "
                         "rest of the reply)")
    args = ap.parse_args()
    global HEADWORD, REFERENCE, THINK_SHARE, COPY_WEIGHT
    HEADWORD, REFERENCE, THINK_SHARE, COPY_WEIGHT = args.headword, args.reference, args.think_share, args.copy_weight
    rng = random.Random(args.seed)
    c = args.corpora
    pools = {
        "devil": split_items(devil_items(os.path.join(c, "dict-devil.txt"), args.def_chars), args.heldout_frac, rng),
        "bible": split_items(bible_items(os.path.join(c, "kjv_bible.txt")), args.heldout_frac, rng),
        "fortune": split_items(fortune_items(os.path.join(c, "fortunes_all.txt")), args.heldout_frac, rng),
        "talk": (SMALL_TALK, SMALL_TALK) if args.talk == "all" else (GREETINGS, GREETINGS),
    }
    # The dictionary is the chat's main subject (a new user is told to ask "What is a cynic?").
    weights = {"devil": args.devil_weight, "bible": 0.3, "fortune": 0.12}
    weights["talk"] = args.talk_weight
    weights = {k: v / sum(weights.values()) for k, v in weights.items()}
    held_weights = weights
    devil_queue = []
    if args.devil_all:
        tr, ho = pools["devil"]
        pools["devil"] = (tr + ho, [])
        held_weights = {k: v for k, v in weights.items() if k != "devil"}
        for it in pools["devil"][0]:
            devil_queue += [it] * (args.popular_copies if it[0] in POPULAR else args.devil_copies)
        rng.shuffle(devil_queue)
    os.makedirs(args.out, exist_ok=True)
    counts = {}
    with open(os.path.join(args.out, "chat.jsonl"), "w", encoding="utf-8") as f:
        for split, n in (("train", args.dialogues), ("heldout", max(200, args.dialogues // 20)), ("devil", None)):
            if split == "devil":
                # The per-entry dictionary dialogues: one to three definitions each, in queue order.
                n, split = 0, "train"
                q = list(devil_queue)
                while q:
                    k = min(len(q), rng.choice([1, 1, 2, 2, 3]))
                    group, q = q[:k], q[k:]
                    _write(f, [make_turn("devil", it, rng) for it in group], ["devil"] * k, rng, split)
                    counts["train_devil"] = counts.get("train_devil", 0) + 1
                continue
            side = 0 if split == "train" else 1
            w = weights if split == "train" else held_weights
            for _ in range(n):
                turns, kinds = [], []
                for _t in range(1 if rng.random() < 0.7 else 2):
                    kind = rng.choices(list(w), weights=list(w.values()))[0]
                    turns.append(make_turn(kind, rng.choice(pools[kind][side]), rng))
                    kinds.append(kind)
                _write(f, turns, kinds, rng, split)
                counts[split] = counts.get(split, 0) + 1
        if args.drill_share > 0:
            words = drill_words(c)
            for _ in range(int(args.drill_share * args.dialogues)):
                f.write(json.dumps({"split": "train", "source": "drill", "segments": drill_segments(rng.choice(words), rng)},
                                   ensure_ascii=False) + "\n")
                counts["train_drill"] = counts.get("train_drill", 0) + 1
    sizes = {k: [len(v[0]), len(v[1])] for k, v in pools.items()}
    json.dump({"counts": counts, "items_train_heldout": sizes, "seed": args.seed, "devil_all": args.devil_all,
               "devil_copies": args.devil_copies if args.devil_all else 0,
               "popular_copies": args.popular_copies if args.devil_all else 0,
               "popular": sorted(POPULAR) if args.devil_all else [], "def_chars": args.def_chars,
               "talk": args.talk, "headword": args.headword, "reference": args.reference, "think_share": args.think_share,
               "copy_weight": args.copy_weight, "drill_share": args.drill_share, "weights": weights},
              open(os.path.join(args.out, "chat.json"), "w"), indent=2)
    print(f"chat_data: {counts} dialogues; items (train, held out): {sizes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
