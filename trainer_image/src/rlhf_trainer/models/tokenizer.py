"""A small BPE tokenizer trained locally on the bundled corpus (no hub download).

Byte-level BPE when the vocabulary has room for the 256 byte symbols (any text can then be
encoded); below that, a character-level BPE over the corpus' characters with an `<unk>` token.
The tokenizer is padded with reserved special tokens to exactly `vocab_size` entries, so that
every id a model of that vocabulary can sample decodes to something defined.
"""

from __future__ import annotations

from importlib import resources

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, *ROLE_TOKENS)

# One turn per message: `<|role|>\ncontent</s>\n`; generation starts after `<|assistant|>\n`,
# and the model ends its answer with `</s>` (the eos token generation stops on).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# Byte-level needs 256 byte symbols + the special tokens + room for some merges.
_BYTE_LEVEL_MIN_VOCAB = 256 + len(SPECIAL_TOKENS) + 16


def bundled_corpus() -> list[str]:
    """The lines of the corpus shipped in `rlhf_trainer/assets/corpus.txt`."""
    text = resources.files("rlhf_trainer.assets").joinpath("corpus.txt").read_text("utf-8")
    return [line for line in text.splitlines() if line.strip()]


def train_tokenizer(vocab_size: int, corpus: list[str] | None = None) -> PreTrainedTokenizerFast:
    """Train a BPE tokenizer of exactly `vocab_size` ids; deterministic for the same corpus."""
    lines = bundled_corpus() if corpus is None else corpus
    if vocab_size < len(SPECIAL_TOKENS) + 16:
        raise ValueError(
            f"vocabSize must be at least {len(SPECIAL_TOKENS) + 16} for the tokenizer "
            f"(special tokens + a minimal alphabet); got {vocab_size}"
        )
    if vocab_size >= _BYTE_LEVEL_MIN_VOCAB:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        # Too small for the byte alphabet: characters of the corpus (most frequent first),
        # everything else maps to <unk>. Metaspace keeps spaces reversible on decode.
        tok = Tokenizer(models.BPE(unk_token=UNK))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            limit_alphabet=vocab_size - len(SPECIAL_TOKENS),
            show_progress=False,
        )
    tok.train_from_iterator(lines, trainer=trainer)
    _pad_to_vocab_size(tok, vocab_size)
    return wrap_tokenizer(tok)


def _pad_to_vocab_size(tok: Tokenizer, vocab_size: int) -> None:
    # A small corpus can run out of merges before the target size; the model's embedding has
    # `vocab_size` rows either way, so name the remaining ids instead of leaving them undefined.
    missing = vocab_size - tok.get_vocab_size()
    if missing > 0:
        tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(missing)])
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"tokenizer has {tok.get_vocab_size()} ids, expected exactly {vocab_size}"
        )


def wrap_tokenizer(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """The transformers tokenizer around a trained `tokenizers.Tokenizer`, with chat template."""
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        extra_special_tokens=list(ROLE_TOKENS),
        # Prompts are left-padded for generation; the chat template adds the bos token itself.
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
