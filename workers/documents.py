"""Example activities: a document pipeline (extract text, count words, detect language, summarize, tag).

Importing this module registers its activities on the default `Activity` registry; `register_activities(registry)`
registers them on another one. The tool schemas are JSON files in `TOOLS_DIR` (`workers/tools/<name>.json`).

All of it is deterministic, offline and fast (plain string processing). `summarize` is an `async def` handler,
to show that both kinds work. `AGENTQ_DEMO_DELAY_MS` (default 0) adds a small delay to every activity for demos.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentq.errors import NonRetryableError
from agentq.protocol.activities import Activity

__all__ = [
    "ACTIVITIES",
    "TOOLS_DIR",
    "TOOL_NAMES",
    "count_words",
    "detect_language",
    "extract_text",
    "register_activities",
    "split_sentences",
    "summarize",
    "tag_document",
    "words",
]

TOOLS_DIR = Path(__file__).resolve().parent / "tools"  # shipped inside the package (package data)
TOOL_NAMES = ("extractText", "countWords", "detectLanguage", "summarize", "tagDocument")

WORDS_PER_MINUTE = 200
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*", re.UNICODE)
_ENDS_SENTENCE = re.compile(r"[.!?…][\"'»”’)\]]*$")
_SENTENCE_END = re.compile(r"[.!?…]+[\"'»”’)\]]*(?=\s+[\"'«“‘(\[¿¡]?(\w))")

#: A few very common words per language: enough to tell these four apart on a sentence or more.
STOPWORDS: dict[str, frozenset[str]] = {
    "en": frozenset(
        "the a an and or but of to in on at for with from by is are was were be been it this that these those "
        "as not have has had do does will would can could should we you they he she i our your their its "
        "there which who what when if so than then into about after over more all".split()
    ),
    "fr": frozenset(
        "le la les un une des et ou mais de du au aux en dans sur pour par avec sans est sont était être été "
        "ce cette ces il elle ils elles nous vous je on qui que quoi dont où ne pas plus se sa son ses leur "
        "leurs y a ont comme après avant aussi très tout tous".split()
    ),
    "de": frozenset(
        "der die das ein eine einen und oder aber von zu im in auf für mit aus bei ist sind war waren sein "
        "es dies diese dieser wir ihr sie er ich nicht hat haben wird werden kann auch nach über mehr alle "
        "dem den des wie wenn dass noch".split()
    ),
    "es": frozenset(
        "el la los las un una unos unas y o pero de del al en sobre para por con sin es son era fue ser "
        "este esta estos estas ese esa que quien cuando donde no más se su sus nosotros ellos ella lo le "
        "les muy también todo todos como hay".split()
    ),
}
_ALL_STOPWORDS = frozenset().union(*STOPWORDS.values())


def _demo_delay_s() -> float:
    try:
        delay_ms = float(os.environ.get("AGENTQ_DEMO_DELAY_MS", "0") or 0)
    except ValueError:
        return 0.0
    return max(delay_ms, 0.0) / 1000.0


def _text_param(call: dict, name: str = "text") -> str:
    value = call.get(name)
    if not isinstance(value, str):
        raise NonRetryableError(f"{name} must be a string, got {type(value).__name__}", type="InvalidInputError")
    return value


def words(text: str) -> list[str]:
    """The words of `text` (letters, with inner apostrophes and hyphens), as written."""
    return _WORD.findall(text)


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`: paragraphs split after `.`, `!`, `?` or `…` (and closing quotes) when the next word
    does not start with a lower-case letter, so "e.g. this" and "3.5 kg" stay whole."""
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):  # a paragraph break always ends a sentence
        flat = re.sub(r"\s+", " ", paragraph).strip()
        start = 0
        for match in _SENTENCE_END.finditer(flat):
            if match.group(1).islower():
                continue
            sentences.append(flat[start : match.end()].strip())
            start = match.end()
        if flat[start:].strip():
            sentences.append(flat[start:].strip())
    return sentences


# --- activities ---------------------------------------------------------------------------------------------


def _markdown_to_text(content: str) -> str:
    text = re.sub(r"```.*?```", "", content, flags=re.DOTALL)  # code blocks
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)  # images -> alt text
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # links -> label
    text = re.sub(r"^[ \t]{0,3}#{1,6}[ \t]*", "", text, flags=re.MULTILINE)  # headings
    text = re.sub(r"^[ \t]{0,3}(?:[-*+]|\d+\.)[ \t]+", "", text, flags=re.MULTILINE)  # list markers
    text = re.sub(r"^[ \t]{0,3}>[ \t]?", "", text, flags=re.MULTILINE)  # quotes
    text = re.sub(r"(\*\*|__|\*|_|`)(.+?)\1", r"\2", text)  # emphasis, inline code
    return text


def _html_to_text(content: str) -> str:
    text = re.sub(r"(?is)<(script|style)\b.*?</\1\s*>", "", content)
    text = re.sub(r"(?i)<br\s*/?>", "\n", text)
    text = re.sub(r"(?i)</(p|div|h[1-6]|li|tr|section|article)\s*>", "\n\n", text)
    text = re.sub(r"<[^>]+>", "", text)
    return html.unescape(text)


def extract_text(call: dict) -> dict:
    """`extractText`: plain text of a text, Markdown or HTML document (paragraphs kept, blank lines squeezed)."""
    time.sleep(_demo_delay_s())
    document = call.get("document")
    if not isinstance(document, dict) or not isinstance(document.get("content"), str):
        raise NonRetryableError("document must be an object with a string content", type="InvalidInputError")
    fmt = document.get("format") or "text"
    content = document["content"]
    if fmt == "markdown":
        content = _markdown_to_text(content)
    elif fmt == "html":
        content = _html_to_text(content)
    elif fmt != "text":
        raise NonRetryableError(f"unsupported format {fmt!r}; use text, markdown or html", type="InvalidInputError")
    paragraphs = [re.sub(r"[ \t]+", " ", p).strip() for p in re.split(r"\n\s*\n", content)]
    text = "\n\n".join(" ".join(line.strip() for line in p.splitlines() if line.strip()) for p in paragraphs if p)
    return {"title": document.get("title"), "format": fmt, "text": text, "characters": len(text)}


def count_words(call: dict) -> dict:
    """`countWords`: words, sentences, paragraphs, characters and reading time (200 words a minute)."""
    time.sleep(_demo_delay_s())
    text = _text_param(call)
    word_count = len(words(text))
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    return {
        "words": word_count,
        "sentences": len(split_sentences(text)),
        "paragraphs": len(paragraphs),
        "characters": len(text),
        "reading_time_s": round(word_count * 60 / WORDS_PER_MINUTE),
    }


def detect_language(call: dict) -> dict:
    """`detectLanguage`: the language whose common words cover most of the text; `und` below 2 hits."""
    time.sleep(_demo_delay_s())
    tokens = [w.lower() for w in words(_text_param(call))]
    scores = {lang: sum(1 for t in tokens if t in stop) for lang, stop in STOPWORDS.items()}
    best = max(sorted(scores), key=lambda lang: scores[lang])  # ties: alphabetical, deterministic
    total = sum(scores.values())
    if scores[best] < 2 or total == 0:
        return {"language": "und", "confidence": 0.0}
    return {"language": best, "confidence": round(scores[best] / total, 2)}


async def summarize(call: dict) -> dict:
    """`summarize` (async): the first `maxSentences` sentences of the text (lines without final punctuation,
    such as headings, are skipped unless there is nothing else)."""
    delay = _demo_delay_s()
    if delay:
        await asyncio.sleep(delay)
    text = _text_param(call)
    limit = call.get("maxSentences")
    limit = 2 if limit is None else limit
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise NonRetryableError("maxSentences must be a positive integer", type="InvalidInputError")
    sentences = split_sentences(text)
    # Headings and list fragments are not sentences: prefer those that end like one.
    sentences = [s for s in sentences if _ENDS_SENTENCE.search(s)] or sentences
    chosen = sentences[:limit]
    return {"summary": " ".join(chosen), "sentences": len(chosen), "truncated": len(sentences) > limit}


def tag_document(call: dict, context: Any) -> dict:
    """`tagDocument`: the most frequent meaningful words (4+ letters, not common words), ties alphabetical.

    The language comes from the `language` parameter, else from `context["state"]["language"]` when the call
    has the state scope; without either, the common words of every known language are skipped.
    """
    time.sleep(_demo_delay_s())
    text = _text_param(call)
    limit = call.get("maxTags")
    limit = 5 if limit is None else limit
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise NonRetryableError("maxTags must be a positive integer", type="InvalidInputError")
    language = call.get("language") or _language_from_state(context)
    stop = STOPWORDS.get(language, _ALL_STOPWORDS) if language else _ALL_STOPWORDS
    counts = Counter(w.lower() for w in words(text) if len(w) >= 4 and w.lower() not in stop)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    result: dict[str, Any] = {"tags": [word for word, _ in ranked[:limit]]}
    if language:
        result["language"] = language
    return result


def _language_from_state(context: Any) -> str | None:
    if context is None:
        return None
    try:
        state = context["state"]
    except (KeyError, TypeError, IndexError):
        return None
    found = state.get("language") if isinstance(state, dict) else None
    if isinstance(found, dict):  # the whole detectLanguage result was written there
        found = found.get("language")
    return found if isinstance(found, str) and found in STOPWORDS else None


# --- registration -------------------------------------------------------------------------------------------

#: activity name -> (handler, options for `ActivityRegistry.register`)
ACTIVITIES: dict[str, tuple[Any, dict[str, Any]]] = {
    "extractText": (extract_text, {"timeout": 10}),
    "countWords": (count_words, {"timeout": 10}),
    "detectLanguage": (detect_language, {"timeout": 10}),
    "summarize": (summarize, {"retries": 1, "retry_backoff": 0.05, "timeout": 20}),
    "tagDocument": (tag_document, {"timeout": 10}),
}


def register_activities(registry: Any) -> None:
    """Register this module's activities on `registry` (an `ActivityRegistry`)."""
    for name, (handler, options) in ACTIVITIES.items():
        registry.register(name, handler, **options)


register_activities(Activity)
