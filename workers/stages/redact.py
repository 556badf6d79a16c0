"""Secret redaction for everything memoryd stores or embeds.

Two layers, each replacing a secret with ``[REDACTED:<type>]``:

1. A reviewed regex set run over the whole text, catching what detect-secrets misses in free
   text: ``sk-``/``sk-ant-`` keys, GitHub/GitLab/Slack/AWS tokens, JWTs, PEM private key blocks,
   ``PASSWORD=``-style ``.env`` lines, bearer tokens, ``user:password@`` in URLs, and values of
   a known shape with no label at all (an AWS secret access key, the first body line of a
   private key).
2. detect-secrets' own detector plugins, run line by line.

A :class:`SecretMemory` adds a third: values found before in the same context (a transcript, a
file) are redacted wherever they appear again, labelled or not.

A redaction never changes the number of lines: a secret spanning lines (a PEM block) is
replaced by its marker followed by the same newlines, so code chunks keep their line numbers.

Speed: a regex (or plugin) only runs when a literal it needs occurs in the text (plain
substring tests, which are very fast), so ordinary text costs a few substring scans per rule.
detect-secrets' entropy and public-IP plugins are not used: in transcripts they flag commit
hashes, content hashes and base64 test data, and would destroy useful text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import blake3

from memoryd.scan import secret_file
from memoryd.vocabulary import EDGE_TEXT_FIELDS, SEARCHED_TABLES

REDACTED = "[REDACTED:{}]"
_MARK = "[REDACTED:"


@dataclass(frozen=True, slots=True)
class Finding:
    """One redacted secret: its type and where it was in the *original* text."""

    type: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Rule:
    type: str
    pattern: re.Pattern[str]
    # The rule runs only if one of these occurs in the text (lower-cased when ``fold``);
    # a rule with none always runs.
    triggers: tuple[str, ...]
    fold: bool = False
    group: int = 0  # the capture group holding the secret (0 = whole match)
    # Given the match, True when the captured value is not a secret after all.
    keep: Callable[[re.Match[str]], bool] | None = None


# What a PEM body may hold between its BEGIN and END lines: base64, header lines (Proc-Type,
# DEK-Info), and the quotes and escaped newlines of a key written as a JSON or code string.
_PEM_BODY = r"[A-Za-z0-9+/=\s:,\\\"'-]"
# A block cut before its END line (truncated output): the body lines that follow BEGIN.
_PEM_CUT = r"(?:(?:\\n|[\s\"'])+(?:[A-Za-z0-9+/]{16,}={0,2}|(?:Proc-Type|DEK-Info):[^\n\"']*))*"
_HEX = re.compile(r"[0-9a-fA-F]+")
_LOWER_RUN = re.compile(r"[a-z]{9}")


def _entropy(text: str) -> float:
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _random_40(value: str) -> bool:
    """Whether 40 base64 characters look random (an AWS secret key), not a word or a hash.

    Of random ones, about 1% fail: fewer than two digits (0.5%), a run of nine lower-case
    letters (0.8%), entropy under 4.2 bits (none in 100,000). Identifiers and paths have runs
    of lower-case letters and few digits; a git SHA is hex.
    """
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and sum(c.isdigit() for c in value) >= 2
        and not _HEX.fullmatch(value)
        and not _LOWER_RUN.search(value)
        and _entropy(value) >= 4.2
    )


_OPERATOR = re.compile(r"[\"']?[ \t]*(?::=|=|:)[ \t]*$")
_STYLE_WORD = r"(?:(?:bg|border):)?#[0-9a-fA-F]{3,8}|[a-z]+"
_STYLE = re.compile(rf"(?:{_STYLE_WORD})(?:\s+(?:{_STYLE_WORD}))*")
_CODE_VALUE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|.*[()\[\]].*")
_IDENTIFIER = re.compile(r"[A-Za-z_]+")
_PLACEHOLDERS = frozenset({"none", "null", "true", "false", "undefined", "nil", "required"})


def _not_literal(m: re.Match[str]) -> bool:
    """True for right-hand sides of ``KEY=value`` that are code or placeholders, not secrets."""
    value = m.group(1)
    v = value.strip("'\"")
    if not v or v.startswith(("$", "%", "{", "<", "[REDACTED")) or v.lower() in _PLACEHOLDERS:
        return True
    if value[0] in "'\"":
        # A quoted literal is data, unless it is a colour or style (`Token: "bold #f8f8f2"`).
        return "#" in v and _STYLE.fullmatch(v) is not None
    # What ends a word in code or prose: `token=True`, f(x=x), {"k": value}.
    bare = v.strip("`").rstrip(".)]}`")
    if bare.lower() in _PLACEHOLDERS:
        return True
    # Expressions such as os.environ["X"], self.token, get_token(), settings.SECRET
    if _CODE_VALUE.fullmatch(bare):
        return True
    if not _IDENTIFIER.fullmatch(bare):
        return False
    # A bare word (`apiKey: string`, `token = value`, `f(password=password)`) is code unless
    # written .env style: a line of its own, `[export ]KEY=word`, not `name=name`.
    text = m.string
    key_start = m.start()
    while key_start > 0 and (text[key_start - 1].isalnum() or text[key_start - 1] in "_.-"):
        key_start -= 1
    key = _OPERATOR.sub("", text[key_start : m.start(1)])
    line_start = text.rfind("\n", 0, key_start) + 1
    line_end = text.find("\n", m.end())
    before = text[line_start:key_start].strip()
    after = text[m.end() : line_end if line_end >= 0 else len(text)].strip()
    env_style = (
        re.search(r"\w=$", m.group(0)[: -len(value)]) is not None
        and before in ("", "export")
        and (not after or after.startswith("#"))
    )
    return not env_style or bare.lower() == key.lower()


_ENV_KEYWORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "accesskey",
    "private_key",
    "auth_key",
    "credential",
)

# Ordered: the most specific patterns first, so their type names win on overlaps.
_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private-key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            rf"(?:{_PEM_BODY}*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|{_PEM_CUT})"
        ),
        ("PRIVATE KEY",),
    ),
    # A private key's body without its BEGIN line: the DER start of PKCS#1/PKCS#8 (version 0),
    # encrypted PKCS#8, SEC1 EC and OpenSSH keys, and the body lines that follow it.
    # Certificates and public keys start otherwise (MII..CC / MII..ANBg) and are kept.
    _Rule(
        "private-key",
        re.compile(
            r"(?<![A-Za-z0-9+/])(?:MII[A-Za-z0-9+/]{3}IBA[AD]|MII[A-Za-z0-9+/]{5}BgkqhkiG9w0BBQ"
            r"|MHcCAQEE|MC4CAQAwBQYDK2Vw|b3BlbnNzaC1rZXktdjE)[A-Za-z0-9+/]{16,}={0,2}"
            r"(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/]{16,}={0,2})*"
        ),
        ("MII", "MHcCAQEE", "MC4CAQAw", "b3BlbnNzaC1rZXktdjE"),
    ),
    _Rule(
        "anthropic-key",
        re.compile(r"(?<![\w-])sk-ant-(?:api|admin|oat)?\d*-?[A-Za-z0-9_-]{20,}"),
        ("sk-ant-",),
    ),
    _Rule(
        "openai-key",
        re.compile(r"(?<![\w-])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
        ("sk-",),
    ),
    _Rule(
        "github-token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_\w{22,255})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _Rule(
        "gitlab-token",
        re.compile(r"\bgl(?:pat|dt|ft|soat|rt|cbt|ptt)-[A-Za-z0-9_-]{20,}"),
        ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glptt-"),
    ),
    _Rule(
        "aws-access-key",
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
    ),
    # An AWS secret access key: 40 characters of base64 with no label and no prefix.
    _Rule(
        "aws-secret-key",
        re.compile(r"(?<![\w/+.-])[A-Za-z0-9/+]{40}(?![\w/+=-])"),
        (),
        keep=lambda m: not _random_40(m.group(0)),
    ),
    _Rule(
        "slack-token",
        re.compile(r"\b(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{20,})"),
        ("xox", "xapp-"),
    ),
    _Rule(
        "slack-webhook",
        re.compile(r"https://hooks\.slack\.com/services/T\w+/B\w+/\w+"),
        ("hooks.slack.com",),
    ),
    _Rule("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), ("AIza",)),
    _Rule(
        "stripe-key",
        re.compile(r"\b(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[0-9A-Za-z]{24,})"),
        ("_live_", "_test_", "whsec_"),
    ),
    _Rule("huggingface-token", re.compile(r"\bhf_[A-Za-z0-9]{30,}"), ("hf_",)),
    _Rule("npm-token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), ("npm_",)),
    _Rule("pypi-token", re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{50,}"), ("pypi-",)),
    _Rule(
        "jwt",
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
        ("eyJ",),
    ),
    _Rule(
        "bearer-token",
        re.compile(r"(?i)\b(?:bearer|token)[ \t]+([A-Za-z0-9._~+/-]{16,}=*)"),
        ("bearer", "token "),
        fold=True,
        group=1,
        # "token for the", "token set_active_token(...)": prose and code have no digits
        keep=lambda m: not any(c.isdigit() for c in m.group(1)),
    ),
    _Rule(
        "basic-auth",
        re.compile(r"(?i)\bauthorization:\s*basic\s+([A-Za-z0-9+/]{8,}=*)"),
        ("authorization",),
        fold=True,
        group=1,
    ),
    _Rule(
        "url-password",
        re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@\"'<>]+:([^\s/@\"'<>]+)@"),
        ("://",),
        group=1,
        keep=lambda m: m.group(1).startswith(("$", "{", "<", "[REDACTED")),
    ),
    _Rule(
        "env-secret",
        re.compile(
            r"(?i)(?:password|passwd|passphrase|secret|token|api[_-]?key|access_?key|"
            r"private_?key|auth_?key|credentials?)[\"']?[ \t]*(?::=|=|:)[ \t]*"
            r"(\"[^\"\n]{3,}\"|'[^'\n]{3,}'|[^\s\"',;#]{4,})"
        ),
        _ENV_KEYWORDS,
        fold=True,
        group=1,
        keep=_not_literal,
    ),
)

_KEYWORDS = ("key", "pass", "pwd", "pw", "secret", "token", "contrase")
_KEYWORD_DENYLIST = re.compile(
    r"(?:api|auth|service|account|db|database|priv|private|client)_?key|"
    r"(?:db|database|key)_?pass|passw|pwd|secret|contrase"
)


def _has(*words: str) -> Callable[[str, str], bool]:
    return lambda line, _lower: any(w in line for w in words)


def _has_folded(*words: str) -> Callable[[str, str], bool]:
    return lambda _line, lower: any(w in lower for w in words)


def _keyword_and(*words: str) -> Callable[[str, str], bool]:
    """A keyword-assignment plugin: needs a secret-ish keyword and one of its own words."""
    return lambda _line, lower: (
        any(w in lower for w in words) and any(k in lower for k in _KEYWORDS)
    )


# Per detect-secrets plugin: the literal(s) its patterns cannot match without.
_PLUGIN_TRIGGERS: dict[str, Callable[[str, str], bool]] = {
    "AWSKeyDetector": lambda line, lower: (
        "aws" in lower or any(p in line for p in ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"))
    ),
    "ArtifactoryDetector": _has("AKC", "AP"),
    "AzureStorageKeyDetector": _has("AccountKey="),
    "BasicAuthDetector": lambda line, _lower: "://" in line and "@" in line,
    "CloudantDetector": _keyword_and("cl"),
    "DiscordBotTokenDetector": lambda line, _lower: "." in line and len(line) >= 59,
    "GitHubTokenDetector": _has("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "GitLabTokenDetector": _has("gl", "GR1348941"),
    "IbmCosHmacDetector": _keyword_and("secret"),
    "IbmCloudIamDetector": _keyword_and("ibm", "iam", "cloud"),
    "JwtTokenDetector": _has("eyJ"),
    "MailchimpDetector": _has("-us"),
    "NpmDetector": _has("_authToken"),
    "OpenAIDetector": _has("T3BlbkFJ"),
    "PypiTokenDetector": _has("pypi-"),
    # Its denylist, in the quotes-required mode used for free text.
    "KeywordDetector": lambda line, lower: (
        ('"' in line or "'" in line) and _KEYWORD_DENYLIST.search(lower) is not None
    ),
    "SendGridDetector": _has("SG."),
    "SlackDetector": lambda line, lower: "xox" in lower or "hooks.slack.com" in line,
    "SoftlayerDetector": _keyword_and("softlayer", "sl"),
    "SquareOAuthDetector": _has("sq0csp-"),
    "StripeDetector": _has("k_live_"),
    "TelegramBotTokenDetector": lambda line, _lower: ":" in line,
    "TwilioKeyDetector": _has("AC", "SK"),
}

# detect-secrets plugins left out: they flag hashes, base64 and IPs, which transcripts are full
# of; PEM blocks are handled (whole block, not just the header) by the regex layer.
_EXCLUDED_PLUGINS = frozenset(
    {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector", "PrivateKeyDetector"}
)


@dataclass(frozen=True, slots=True)
class _Plugin:
    type: str
    detector: Any
    trigger: Callable[[str, str], bool]


@lru_cache(maxsize=1)
def _plugins() -> tuple[_Plugin, ...]:
    """detect-secrets detector instances, built once (their constructors compile regexes)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    out: list[_Plugin] = []
    for secret_type, cls in sorted(get_mapping_from_secret_type_to_class().items()):
        if cls.__name__ in _EXCLUDED_PLUGINS:
            continue
        try:
            detector = cls()
        except TypeError:  # a plugin that needs configuration we do not have
            continue
        # A plugin added in a later detect-secrets release runs on keyword lines only.
        trigger = _PLUGIN_TRIGGERS.get(cls.__name__, _has_folded(*_KEYWORDS))
        out.append(_Plugin(_slug(secret_type), detector, trigger))
    return tuple(out)


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


def redact(text: str, memory: SecretMemory | None = None) -> str:
    """Return ``text`` with every secret found replaced by ``[REDACTED:<type>]``."""
    return redact_with_findings(text, memory)[0]


def redact_with_findings(
    text: str, memory: SecretMemory | None = None
) -> tuple[str, list[Finding]]:
    """Redact ``text``; also return what was found (types and original positions).

    With a ``memory``, what is found is remembered, and values remembered before (in this text
    or an earlier one) are redacted too.
    """
    if not text or len(text) < 8:
        return text, []
    lower = text.lower()
    spans = _regex_spans(text, lower)
    spans = _merge(spans + _plugin_spans(text, lower, spans))
    if memory is not None:
        for f in spans:
            memory.remember(text[f.start : f.end], f.type)
        spans = _merge(spans + memory.spans(text))
    if not spans:
        return text, []
    parts: list[str] = []
    last = 0
    for f in spans:
        parts.append(text[last : f.start])
        parts.append(REDACTED.format(f.type))
        parts.append("\n" * text.count("\n", f.start, f.end))  # line numbers stay put
        last = f.end
    parts.append(text[last:])
    return "".join(parts), spans


def _regex_spans(text: str, lower: str) -> list[Finding]:
    found: list[Finding] = []
    for rule in _RULES:
        haystack = lower if rule.fold else text
        if rule.triggers and not any(t in haystack for t in rule.triggers):
            continue
        for m in rule.pattern.finditer(text):
            value = m.group(rule.group)
            if value is None or (rule.keep is not None and rule.keep(m)):
                continue
            start, end = m.span(rule.group)
            if value[:1] in ("'", '"') and len(value) >= 2:
                start, end = start + 1, end - 1  # keep the quotes, redact what is inside
            found.append(Finding(rule.type, start, end))
    return found


def _plugin_spans(text: str, lower_text: str, known: list[Finding]) -> list[Finding]:
    """Run detect-secrets' plugins on the lines holding the literals they need."""
    # Checking the whole text first leaves most plugins out of the per-line loop.
    plugins = [p for p in _plugins() if p.trigger(text, lower_text)]
    found: list[Finding] = []
    if not plugins:
        return found
    pos = 0
    for line in text.splitlines(keepends=True):
        start = pos
        pos += len(line)
        if len(line) < 8:
            continue
        lower = line.lower()
        for plugin in plugins:
            if plugin.trigger(line, lower):
                for secret in _plugin_matches(plugin, line):
                    found.extend(_locate(secret, line, start, plugin.type, known))
    return found


def _plugin_matches(plugin: _Plugin, line: str) -> Iterable[str]:
    try:
        found = [s for s in plugin.detector.analyze_string(line) if isinstance(s, str)]
    except Exception:  # a third-party plugin failing must never lose the transcript
        return []
    # The keyword plugin takes any quoted string after a keyword: `secret_type = 'AWS Access
    # Key'` is a name. Quoted secrets with spaces are the regex layer's (env-secret).
    words = plugin.type == "secret-keyword"
    return [s for s in found if len(s) >= 4 and not (words and any(c.isspace() for c in s))]


def _locate(secret: str, line: str, base: int, type_: str, known: list[Finding]) -> list[Finding]:
    """Positions of a plugin's secret value in the line, unless the regex layer covered it."""
    out: list[Finding] = []
    if _MARK in secret:
        return out
    i = line.find(secret)
    while i >= 0:
        f = Finding(type_, base + i, base + i + len(secret))
        if not any(k.start <= f.start and f.end <= k.end for k in known):
            out.append(f)
        i = line.find(secret, i + len(secret))
    return out


def _merge(spans: list[Finding]) -> list[Finding]:
    """Sort and merge overlapping findings; the earliest-starting (then longest) type wins."""
    spans.sort(key=lambda f: (f.start, -f.end))
    merged: list[Finding] = []
    for f in spans:
        if merged and f.start < merged[-1].end:
            last = merged[-1]
            if f.end > last.end:
                merged[-1] = Finding(last.type, last.start, f.end)
            continue
        merged.append(f)
    return merged


# ------------------------------------------------------------------------------------------
# Values seen before

# Shorter values are not remembered: they would match ordinary words.
_MIN_REMEMBERED = 8
# A PEM block is remembered line by line (a body line may be pasted alone later).
_MIN_LINE = 16
# Where a remembered value may start and end inside a text: whitespace-separated words, and
# the pieces of a word between quotes, brackets, `=`, `:`, `,`, `;` and `@` (`KEY=value`,
# `"value",`, `user:value@host`).
_WORD = re.compile(r"\S+")
_PIECE = re.compile(r"[^\s\"'`,;:=@<>()\[\]{}]+")
_TRAILING = ".,;:!?)]}>\"'`"
_LEADING = "([{<\"'`"


def _memorable(value: str) -> bool:
    """A value worth redacting wherever it appears again: long enough, not a plain word."""
    if len(value) < _MIN_REMEMBERED or any(c.isspace() for c in value) or _MARK in value:
        return False
    return len(value) >= 16 or not value.isalpha()


class SecretMemory:
    """Fingerprints of the secret values redacted so far in one context (a transcript's
    parser state, one file), so that a value once found is redacted wherever it shows up
    again: a password repeated alone, a PEM body line pasted without its BEGIN line.

    Only fingerprints are kept, never the values: a transcript's memory is saved with its
    parser state in the cursor row, in the database. A fingerprint is the value's length and
    32 bits of a BLAKE3 hash keyed by a salt of the context (``salt``: e.g. the transcript's
    path), so the same secret fingerprints differently in two transcripts, and 32 bits cannot
    confirm a guess: of the values with a password's usual ~40 bits of entropy some 2^8 share
    one fingerprint, and a random token cannot be recovered at all. A word of ordinary text
    matches by chance with odds of about 1 in 4 billion per remembered value of its length.
    """

    def __init__(self, salt: str, fingerprints: Mapping[str, str] | None = None) -> None:
        self._key = blake3.blake3(salt.encode("utf-8", "surrogatepass")).digest()
        # fingerprint -> the type of secret it was found as (for the marker)
        self.fingerprints: dict[str, str] = dict(fingerprints or {})
        self._lengths = {int(fp.split(":", 1)[0]) for fp in self.fingerprints}

    def _fingerprint(self, value: str) -> str:
        digest = blake3.blake3(value.encode("utf-8", "surrogatepass"), key=self._key)
        return f"{len(value)}:{digest.hexdigest()[:8]}"

    def remember(self, value: str, type_: str) -> None:
        lines = value.splitlines()
        if len(lines) > 1:
            # A block: its body lines, not the BEGIN/END lines everyone's keys share.
            candidates = [line.strip(" \t\"'\\,") for line in lines if "-----" not in line]
            candidates = [c.removesuffix("\\n") for c in candidates]
            values = [c for c in candidates if len(c) >= _MIN_LINE]
        else:
            values = [value.strip()]
        for v in values:
            if _memorable(v):
                self.fingerprints.setdefault(self._fingerprint(v), type_)
                self._lengths.add(len(v))

    def spans(self, text: str) -> list[Finding]:
        """Where remembered values occur in ``text``."""
        if not self.fingerprints:
            return []
        found: dict[tuple[int, int], str] = {}
        for start, end in self._candidates(text):
            if (start, end) in found or end - start not in self._lengths:
                continue
            type_ = self.fingerprints.get(self._fingerprint(text[start:end]))
            if type_ is not None:
                found[(start, end)] = type_
        return [Finding(type_, start, end) for (start, end), type_ in found.items()]

    @staticmethod
    def _candidates(text: str) -> Iterable[tuple[int, int]]:
        for pattern in (_WORD, _PIECE):
            for m in pattern.finditer(text):
                start, end = m.span()
                yield start, end
                word = m.group()
                inner = word.lstrip(_LEADING).rstrip(_TRAILING)
                if inner and inner != word:
                    left = start + len(word) - len(word.lstrip(_LEADING))
                    yield left, left + len(inner)
                trimmed = word.rstrip(_TRAILING)
                if trimmed and trimmed != word:
                    yield start, start + len(trimmed)


# ------------------------------------------------------------------------------------------
# Scrubbing rows stored before (a migration step)

# Text fields that may hold a secret, per table, as memoryd stores them.
SCRUB_FIELDS: dict[str, tuple[str, ...]] = {
    **{table: (field,) for table, field in SEARCHED_TABLES.items()},
    "summary": ("text",),
    "session": ("description",),
    "entity": ("name", "aliases"),
    **{table: (field,) for table, field in EDGE_TEXT_FIELDS.items()},
    "transcript_cursor": ("state",),
}
# Tables whose vector is computed from the scrubbed text: it was computed from the secret too.
_EMBEDDED = frozenset(SEARCHED_TABLES)


@dataclass(slots=True)
class Scrubbed:
    """What scrubbing one table's rows asks of the database.

    ``updates``: per changed row, its ``id`` and the new values of the fields that changed;
    for tables with vectors also ``embedding: None`` (the vector was computed from the secret;
    with ``embedding_model`` kept, the reembed task computes it again from the redacted text),
    and for code chunks the new ``content_hash``.
    ``deletes``: ids of code chunks of files ``secret_files`` keeps out of the index now.
    ``reindex``: (project, path) of code files with a changed chunk: resetting their
    ``file_state`` (``hash = NONE, mtime_ns = 0``) makes the next reconcile cut them again from
    the redacted file, as fresh indexing does (chunk boundaries can move).
    """

    updates: list[dict[str, Any]]
    deletes: list[Any]
    reindex: set[tuple[Any, str]]


def scrub_rows(
    table: str, rows: Iterable[Mapping[str, Any]], secret_globs: Iterable[str] = ()
) -> Scrubbed:
    """Redact rows stored by an earlier memoryd with today's detector (pure: rows in, changes
    out). Rows of one file (code chunks) or one session (memories) share a
    :class:`SecretMemory`, in file or session order, as when they were first written."""
    out = Scrubbed([], [], set())
    fields = SCRUB_FIELDS.get(table, ())
    globs = list(secret_globs)
    memories: dict[str, SecretMemory] = {}
    for row in sorted(rows, key=_row_order):
        if table == "code_chunk" and secret_file(str(row.get("path", "")), globs):
            out.deletes.append(row["id"])
            continue
        group = _group(table, row)
        memory = memories.setdefault(group, SecretMemory(group)) if group else None
        patch: dict[str, Any] = {}
        for name in fields:
            value = row.get(name)
            scrubbed = _scrub_value(value, memory)
            if scrubbed != value:
                patch[name] = scrubbed
        if not patch:
            continue
        if table in _EMBEDDED:
            patch["embedding"] = None
        if table == "code_chunk":
            content = patch["content"].encode("utf-8", "surrogatepass")
            patch["content_hash"] = blake3.blake3(content).hexdigest()
            out.reindex.add((row.get("project"), str(row.get("path"))))
        out.updates.append({"id": row["id"], **patch})
    return out


def _row_order(row: Mapping[str, Any]) -> tuple[str, str, int, int]:
    return (
        str(row.get("session") or row.get("project") or ""),
        str(row.get("path") or ""),
        int(row.get("start_line") or 0),
        int(row.get("seq") or 0),
    )


def _group(table: str, row: Mapping[str, Any]) -> str:
    if table == "code_chunk":
        return str(row.get("path") or "")
    if table == "memory":
        return str(row.get("session") or "")
    return ""


def _scrub_value(value: Any, memory: SecretMemory | None) -> Any:
    """Strings redacted; lists and objects (aliases, a parser state) walked."""
    if isinstance(value, str):
        return redact(value, memory)
    if isinstance(value, list):
        return [_scrub_value(v, memory) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_value(v, memory) for k, v in value.items()}
    return value
