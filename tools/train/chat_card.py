#!/usr/bin/env python3
"""Writes the "Chat" section of models/README.md (the demo model's card) from what
chat_finetune.sh measured in each fine-tuning round: ROUND_DIR/run/finetune.json and
train.log.jsonl, ROUND_DIR/ppl-start.json / ppl-after.json and ROUND_DIR/samples.txt. Rounds are
given in the order they ran (each started from the one before). The section sits between two
marker lines and is replaced on every run; the rest of the card (model_card.py) is left alone.
With --keep-rows the card's table rows of the rounds before --first-round stay (their directories
may be gone); the block between the chat-notes markers (hand-written: the rounds tried and not
shipped, and what the replies show) is kept as it is.

  python3 tools/train/chat_card.py ROUND_DIR [ROUND_DIR ...] [-o models/README.md]
  python3 tools/train/chat_card.py --keep-rows --first-round 5 --started-from "round 2" build-chat5
"""
import argparse
import json
import os

BEGIN = "<!-- chat section: written by tools/train/chat_card.py -->"
END = "<!-- end of chat section -->"
NOTES = "<!-- chat notes: hand-written, kept by chat_card.py -->"
NOTES_END = "<!-- end of chat notes -->"


def load_json(path):
    # Older rounds captured perplexity's progress line before the JSON document (since fixed:
    # progress goes to stderr); the document is what follows the last "[N]..." prefix.
    text = open(path, encoding="utf-8").read()
    return json.loads(text[text.index("{"):])


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", nargs="+")
    ap.add_argument("-o", "--output", default=os.path.join(root, "models", "README.md"))
    ap.add_argument("--first-round", type=int, default=1, help="the number of the first ROUND_DIR's round")
    ap.add_argument("--started-from", help="what the first ROUND_DIR's round started from (default: the round before)")
    ap.add_argument("--keep-rows", action="store_true", help="keep the card's table rows of the earlier rounds")
    a = ap.parse_args()
    card = open(a.output, encoding="utf-8").read()
    old = card.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in card else ""
    kept = []
    if a.keep_rows:
        for ln in old.split("\n"):
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if ln.startswith("|") and cells[0].isdigit() and int(cells[0]) < a.first_round:
                kept.append(ln)
        if not kept and a.first_round > 1:
            raise SystemExit(f"chat_card: --keep-rows: no table row before round {a.first_round} in {a.output}")
    notes = ""
    if NOTES in old:
        notes = NOTES + old.split(NOTES, 1)[1].split(NOTES_END, 1)[0] + NOTES_END

    lines = [BEGIN, "## Chat", ""]
    w = lines.append
    first_ppl = load_json(os.path.join(a.rounds[0], "ppl-start.json"))
    if kept:   # the first round's "before" perplexity is the last cell of its row
        first_ppl = {"ppl": float(kept[0].strip().strip("|").split("|")[-1].split("->")[0])}
    last_ppl = load_json(os.path.join(a.rounds[-1], "ppl-after.json"))
    w("The pre-trained model above only continues text. It was then fine-tuned to answer in Kimi K3's chat")
    w("template (`tools/train/chat_finetune.sh`): dialogues made from the same corpora by `chat_data.py` (a word")
    w("-> its Devil's Dictionary definition, a Bible reference -> its verse, a fortune's question -> its answer,")
    w("a few greetings; one or two turns, with and without a short think block, every reply ending its turn),")
    w("mixed with plain-text rows so that the model keeps its English. Only the replies are scored.")
    w("")
    w("| round | started from | steps | minutes | lr | rows per step (chat + plain) | packed | dictionary entries | "
      "held-out chat loss before -> after | plain-text ppl before -> after |")
    w("|---:|---|---:|---:|---:|---:|---|---|---:|---:|")
    lines += kept
    for i, d in enumerate(a.rounds):
        fj = load_json(os.path.join(d, "run", "finetune.json"))
        n = a.first_round + i
        start = "the pre-trained model" if n == 1 else f"round {n - 1}"
        if i == 0 and a.started_from:
            start = a.started_from
        data = fj.get("data") or {}
        if data.get("devil_all"):
            devil = (f"all trained ({data['popular_copies']} own dialogues for each of {len(data['popular'])} "
                     f"common words, {data['devil_copies']} for the rest, plus the mixed ones)")
        else:
            devil = "5 % held out"
        if data.get("headword") == "as-asked":
            devil += "; word as asked"
        ppl = "-"
        if os.path.exists(os.path.join(d, "ppl-start.json")) and os.path.exists(os.path.join(d, "ppl-after.json")):
            ppl = (f"{load_json(os.path.join(d, 'ppl-start.json'))['ppl']:.2f} -> "
                   f"{load_json(os.path.join(d, 'ppl-after.json'))['ppl']:.2f}")
        w(f"| {n} | {start} | {fj['steps']} | {fj['train_minutes']:.1f} | {fj['lr']:g} | "
          f"{fj['chat_rows']} + {fj['plain_rows']} of {fj['seq']} tokens | {'yes' if fj.get('pack') else 'no'} | "
          f"{devil} | {fj['heldout_chat_loss_before']:.3f} -> {fj['heldout_chat_loss_after']:.3f} | {ppl} |")
    fj = load_json(os.path.join(a.rounds[-1], "run", "finetune.json"))
    if notes:
        w("")
        w(notes)
    w("")
    w("What is held out: a fixed random 5 % of the Bible verses and of the fortunes, never in training in any")
    w("round. Rounds without \"all trained\" also hold out 5 % of the dictionary entries (the six")
    w("words the card and README use as examples always stay in training). A round marked \"all trained\" trains")
    w("every dictionary entry, so its held-out dialogues are Bible verses, fortunes and greetings only (greetings are")
    w("a few fixed phrases and are in training too), and its dictionary replies below are recall of trained")
    w("definitions, not generalisation. The held-out set changes with the data, so each round's \"before\" is")
    w("measured on that round's own held-out set.")
    data = fj.get("data") or {}
    if data.get("devil_all"):
        w("")
        w("The common words trained most in round " + str(len(a.rounds)) + ": " +
          ", ".join(x.lower() for x in data["popular"]) + ".")
    w("")
    w(f"Dialogues: {fj['train_dialogues']} for training, {fj['heldout_dialogues']} held out "
      f"(the chat loss is the mean over the replies of the first {fj['heldout_chat_dialogues_scored']}).")
    w("")
    w("Plain-text perplexity on the held-out 5 % (`kinfer perplexity -c 512`), before and after the fine-tune:")
    w(f"{first_ppl['ppl']:.2f} -> {last_ppl['ppl']:.2f} (+/- {last_ppl['ppl_error']:.2f}). The chat skill is paid")
    w("for with some of the plain-text fit; the perplexity table above is the pre-trained model's.")
    w("")
    samples = open(os.path.join(a.rounds[-1], "samples.txt"), encoding="utf-8").read().rstrip()
    if "(greedy)" in samples:
        w("Replies (`kinfer run --chat -p ... -n 200 --seed 1`, then with `--temp 0`, marked (greedy);")
        w("thinking hidden as in `kinfer chat`):")
    else:
        w("Replies (`kinfer run --chat -p ... -n 200 --seed 1`, thinking hidden as in `kinfer chat`):")
    w("")
    w("```")
    w(samples)
    w("```")
    w("")
    w("Whatever the model does, `kinfer chat` stays usable: a think block still open after")
    w("`--reasoning-budget N` tokens is closed by the sampler, hidden thinking shows a live")
    w("`[thinking... N tokens]` line, and a reply stops at the context's end with a message.")
    w(END)

    if BEGIN in card:
        head, rest = card.split(BEGIN, 1)
        card = head + "\n".join(lines) + rest.split(END, 1)[1]
    elif "\n## Licence" in card:
        head, tail = card.split("\n## Licence", 1)
        card = head + "\n".join(lines) + "\n\n## Licence" + tail
    else:
        card = card.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    tmp = a.output + ".tmp"
    open(tmp, "w", encoding="utf-8").write(card)
    os.replace(tmp, a.output)
    print(f"chat_card: wrote the chat section of {a.output} ({len(a.rounds)} round(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
