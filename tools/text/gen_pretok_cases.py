#!/usr/bin/env python3
"""Random strings split by the real pre-tokenizer regexes (Python's `regex` module), stored as
tests/data/text/pretok_cases.json for test_pretokenize.cpp: a differential test of the hand-written
matchers in src/text/pretokenize.cpp against a backtracking regex engine.

`\\s` / `\\S` are written as \\p{White_Space} / \\P{White_Space} (what the regex crate, and so
tiktoken, means by them) and the character pool holds only characters whose classes are the same
in Unicode 15.0 (our tables) and in the `regex` module's newer tables. Run once:
  python3 tools/text/gen_pretok_cases.py > tests/data/text/pretok_cases.json
(optional arguments: number of random strings, seed; a larger run is a good check after changes).
"""
import json
import random
import sys

import regex

WS = r"\p{White_Space}"
NWS = r"\P{White_Space}"
CONTR = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
KIMI = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]&&[^\p{Han}]]*[[\p{Ll}\p{Lm}\p{Lo}\p{M}]&&[^\p{Han}]]+" + CONTR,
    r"[^\r\n\p{L}\p{N}]?[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]&&[^\p{Han}]]+[[\p{Ll}\p{Lm}\p{Lo}\p{M}]&&[^\p{Han}]]*" + CONTR,
    r"\p{N}{1,3}",
    r" ?[^WS\p{L}\p{N}]+[\r\n]*",
    r"WS*[\r\n]+",
    r"WS+(?!NWS)",
    r"WS+",
])
O200K = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + CONTR,
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + CONTR,
    r"\p{N}{1,3}",
    r" ?[^WS\p{L}\p{N}]+[\r\n/]*",
    r"WS*[\r\n]+",
    r"WS+(?!NWS)",
    r"WS+",
])
CL100K = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^WS\p{L}\p{N}]++[\r\n]*+"
          r"|WS++$|WS*[\r\n]|WS+(?!NWS)|WS")


def fix(p):
    return p.replace("[^WS", r"[^\p{White_Space}").replace("NWS", NWS).replace("WS", WS)


PATTERNS = {"kimi-k2": regex.compile(fix(KIMI), regex.V1),
            "o200k": regex.compile(fix(O200K), regex.V1),
            "cl100k": regex.compile(fix(CL100K), regex.V1)}

POOL = list("aAbBzZeEsStTrRvVmMlLdD") + list("0123456789") + list(" \t\n\r") + list(".,;:!?'\"-_/\\()[]{}<>@#$%^&*+=|~`") + [
    "\u00a0", "\u3000", "\u2003", "\u0085",            # other White_Space
    "\u4f60", "\u597d", "\u4e16", "\u754c", "\u3007",  # Han (U+3007 is Nl, Script=Han)
    "\u3042", "\u30c6", "\u30fc",                      # kana (Lo), prolonged sound mark (Lm)
    "\ud55c", "\uad6d",                                # Hangul (Lo)
    "\u0301", "\u0308", "\u20dd",                      # marks Mn, Mn, Me
    "\u0915", "\u093f",                                # Devanagari letter (Lo) + vowel sign (Mc)
    "\u0391", "\u03b1", "\u0416", "\u0436",            # Greek / Cyrillic upper, lower
    "\u01c5", "\u1f88",                                # titlecase (Lt)
    "\u02b0", "\u02c6",                                # modifier letters (Lm)
    "\u00e9", "\u00c9", "\u00df", "\u017f",            # é É ß ſ (folds to s)
    "\uff11", "\u0663", "\u00bd", "\u2167",            # fullwidth 1, Arabic-Indic 3, ½ (No), Ⅷ (Nl)
    "\u2019", "\u201c", "\u2014", "\u2026", "\uff0c", "\u3002",  # punctuation
    "\U0001F600", "\u2764", "\ufe0f", "\u200d",        # emoji, VS16 (Mn), ZWJ (Cf)
]


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 20261130)
    cases = []
    for i in range(count):
        n = rng.randint(1, 40)
        # Bias toward runs of similar characters so the interesting branches meet.
        s = "".join(rng.choice(POOL[:rng.choice([22, 32, 36, 67, len(POOL)])]) for _ in range(n))
        cases.append(s)
    cases += ["Hello world", "I'm DON'T it's 'quoted' O'Neil", "  leading", "trailing   ", "a\r\n\r\nb",
              "\u00c9COLE\u0301s", "x\u0301\u0301 \u0301", "\u4f60\u597dabc\u4e16", "123456789", "a/b//c\n/",
              "HELLO'S", "ſ'ſ", "'ſ", "\t\t\n  \n\t x"]
    out = []
    for s in cases:
        rec = {"text": s}
        for name, pat in PATTERNS.items():
            pieces = pat.findall(s)
            assert "".join(pieces) == s, (name, s, pieces)
            rec[name] = pieces
        out.append(rec)
    json.dump(out, sys.stdout, ensure_ascii=False, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
