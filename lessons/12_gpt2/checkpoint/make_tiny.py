"""Makes the tiny GPT-2 checkpoint that lesson 12's tests read, and the answers PyTorch gives
for it.

    pip install torch transformers        # the versions used are recorded in the output
    python3 make_tiny.py                  # writes tiny/ beside this script

What it writes, in tiny/:

- vocab.json, merges.txt: a byte-level BPE vocabulary in GPT-2's format, learnt here from the
  short text CORPUS below (GPT-2's own has 50257 tokens; this one a few hundred, so that the
  checkpoint stays small).
- config.json, model.safetensors: a GPT2LMHeadModel with that vocabulary, 2 layers, 4 heads
  of 16, 64 positions, saved by transformers' save_pretrained (the format of every GPT-2 on
  the Hugging Face hub). Its weights are random, drawn from a fixed seed; the LayerNorm gains
  and every bias are random too (not 1 and 0 as at initialisation), so that a loader that
  swaps or drops one of them gives different logits.
- reference.safetensors: what transformers computes with that model in float64 (eager
  attention): the logits and every layer's hidden states for the tokens of TEXT, and the
  tokens of a greedy generation from those of PROMPT.
- tokenizer_cases.json: texts and the token ids transformers' GPT-2 tokenizer gives them.

Running it again writes the same files (with the same versions of torch and transformers),
except that the metadata in the header of reference.safetensors may come in another order.
"""

import collections
import json
import pathlib

import regex
import safetensors.torch
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

OUT = pathlib.Path(__file__).resolve().parent / "tiny"
SEED = 20261125
MERGES = 320  # at most: the corpus runs out of pairs after 245
NEW_TOKENS = 12
# GPT-2's pre-tokenizer: text is cut into these pieces before BPE merges within each.
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

CORPUS = """\
Attention reads every key for every query. The naive way writes the whole matrix of scores
to memory, then reads it back for the softmax, then again for the product with the values.
FlashAttention keeps a tile of the scores on the chip, rescales the running sum when the
maximum grows, and never writes the matrix at all. It's exact: the answer is the same, only
the memory traffic changes. A language model generates one token at a time, and it doesn't
recompute the keys and values of the tokens before it: they're kept in a cache. In 2022 the
first paper showed 3x speed-ups on GPT-2; the second one split the work over the queries.
"""

# The logits are checked on TEXT (most of the 64 positions); greedy generation starts from
# PROMPT.
TEXT = (
    "A model that reads 64 tokens: FlashAttention keeps a tile of the scores on the chip, "
    "and the cache keeps the keys and values of the tokens before it."
)
PROMPT = "FlashAttention keeps a tile"

TOKENIZER_CASES = [
    "Hello world",
    "FlashAttention keeps a tile of the scores on the chip.",
    "It's exact: they're kept, we'll see, I'd say, you've got it, I'm sure.",
    "Numbers 2022, 3x and 1.5e-3; symbols !?@#$%^&*() and 'quotes'.",
    "Two  spaces, three   spaces,\ttab, new\nline, blank\n\nline, trailing spaces   ",
    "   leading spaces",
    "Unicode: café, naïve, Zürich, 東京, Ελληνικά, emoji 🙂👍",
    "One text<|endoftext|>and the next",
    "",
]


def bytes_to_unicode():
    """GPT-2's table from each byte to a printable character (its encoder.py)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def learn_bpe(text, merges_wanted):
    """Byte-level BPE: start from bytes, repeatedly merge the most frequent adjacent pair
    (ties broken by the pair itself, so that the result is deterministic)."""
    byte_char = bytes_to_unicode()
    words = collections.Counter(
        tuple(byte_char[b] for b in piece.encode("utf-8")) for piece in regex.findall(PATTERN, text)
    )
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], pair))
        merges.append(best)
        merged = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    vocab = {}
    for symbol in [byte_char[b] for b in range(256)] + [a + b for a, b in merges]:
        vocab.setdefault(symbol, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def randomise(model):
    """Random LayerNorm gains and biases, on top of transformers' random initialisation."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if regex.search(r"ln_\w+\.weight$", name):
                parameter.copy_(1.0 + 0.2 * torch.randn_like(parameter))
            elif name.endswith(".bias"):
                parameter.copy_(0.1 * torch.randn_like(parameter))


def main():
    torch.manual_seed(SEED)
    OUT.mkdir(exist_ok=True)
    vocab, merges = learn_bpe(CORPUS, MERGES)
    (OUT / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n")
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    (OUT / "merges.txt").write_text("\n".join(lines) + "\n")
    tokenizer = GPT2Tokenizer.from_pretrained(OUT)

    cases = []
    for text in TOKENIZER_CASES:
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text, text
        cases.append({"text": text, "ids": ids})
    (OUT / "tokenizer_cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")

    end = vocab["<|endoftext|>"]
    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=end,
        eos_token_id=end,
        # Larger than GPT-2's 0.02, so that attention is far from uniform and the logits
        # spread: a check on weak signals would miss a wrong mask or scale.
        initializer_range=0.2,
    )
    model = GPT2LMHeadModel(config)
    randomise(model)
    model.save_pretrained(OUT, safe_serialization=True)
    for extra in ["generation_config.json"]:
        (OUT / extra).unlink(missing_ok=True)

    # The answers, in float64 with the plain attention of the paper.
    model = GPT2LMHeadModel.from_pretrained(OUT, attn_implementation="eager").double().eval()
    text_ids = torch.tensor([tokenizer.encode(TEXT)])
    assert text_ids.shape[1] <= config.n_positions
    ids = torch.tensor([tokenizer.encode(PROMPT)])
    with torch.no_grad():
        out = model(text_ids, output_hidden_states=True)
        generated = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=end,
            eos_token_id=None,
        )[0, ids.shape[1]:]
        # The margin between the best and second-best logit of each greedy step: a float32
        # implementation agrees with float64 token for token only if it is far above f32's
        # error (about 1e-5 here).
        steps = model(generated[None, :-1].new_tensor([ids[0].tolist() + generated[:-1].tolist()])).logits[0, ids.shape[1] - 1 :]
    top2 = steps.topk(2, dim=-1).values
    margins = (top2[:, 0] - top2[:, 1])
    assert steps.argmax(-1).tolist() == generated.tolist()
    assert margins.min() > 1e-3, margins

    tensors = {
        "input_ids": text_ids[0].to(torch.int64),
        "prompt_ids": ids[0].to(torch.int64),
        "logits": out.logits[0].contiguous(),
        "generated": generated.to(torch.int64).contiguous(),
        "greedy_margins": margins.contiguous(),
    }
    for layer, hidden in enumerate(out.hidden_states):
        tensors[f"hidden_states.{layer}"] = hidden[0].contiguous()
    metadata = {
        "text": TEXT,
        "prompt": PROMPT,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hidden_states": "0: embeddings; i: after block i; the last: after the final LayerNorm",
    }
    safetensors.torch.save_file(tensors, OUT / "reference.safetensors", metadata=metadata)
    print(f"wrote {OUT}: vocabulary {len(vocab)}, text {text_ids.shape[1]} tokens, "
          f"prompt {ids.shape[1]} tokens, "
          f"greedy margins >= {margins.min().item():.3g}")


if __name__ == "__main__":
    main()
