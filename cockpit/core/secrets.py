"""Secrets never shown or stored: API keys, tokens and passwords are blanked in argv, env and text.

A name is secret when it holds token, key, secret, password or auth (any case, `--x value`,
`--x=value`, `X=value`, `'x': 'value'`), except the real engines' options that only count tokens
or name a tokenizer (`--max-num-batched-tokens`, `--tokenizer`): hiding those would hide the layout
itself. A URL's password is blanked wherever it appears. Pure functions, no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MASK = "***"
MIN_SECRET = 4  # shorter values are not scrubbed from free text: "1" would blank every digit

_SECRET = re.compile(r"token|key|secret|passw(or)?d|auth", re.I)
# Words that contain a secret word but count or name things: tokens, tokenizer, detokenizer,
# token ids (eos_token_id), an author (GIT_AUTHOR_NAME).
_HARMLESS_WORDS = re.compile(r"tokens(?![a-z])|(de)?tokeniz[a-z]*|token-ids?(?![a-z])|author(?!i)", re.I)
# The real engines' options (vLLM 0.33.0, SGLang 0.5.23) still matching after that, none a secret:
# thresholds, counts, a path, and boolean flags (which also must never swallow the next argument).
_HARMLESS_NAMES = frozenset(
    {
        "dbo-decode-token-threshold",
        "dbo-prefill-token-threshold",
        "long-prefill-token-threshold",
        "bucket-time-to-first-token",
        "bucket-inter-token-latency",
        "speculative-token-map",
        "kt-max-deferred-experts-per-token",
        "prefill-delayer-token-usage-low-watermark",
        "tbo-token-distribution-threshold",
        "ssl-keyfile",
        # boolean flags
        "return-tokens-as-token-ids",
        "no-return-tokens-as-token-ids",
        "long-prefill-token-threshold-adaptive",
        "no-long-prefill-token-threshold-adaptive",
    }
)
# Secret options that take several values (vLLM: `--api-key K1 K2`).
_MANY_VALUES = frozenset({"api-key"})
# Secrets a launch inherits by name; listed so a reader sees they are covered (the name rule catches them).
WELL_KNOWN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "VLLM_API_KEY")

_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][\w+.-]*://[^\s:/@'\"]*):(?P<pw>[^\s@/'\"]+)@")
_QUOTED_ASSIGN = re.compile(
    r"(?P<head>(?P<name>[\w.-]+)['\"]?\s*[:=]\s*(?P<q>['\"]))(?P<value>[^'\"]*)(?P=q)"
)
# A list of values (vLLM: `non-default args: {'api_key': ['V']}`, `Namespace(api_key=['V1', 'V2'])`).
_LIST_ASSIGN = re.compile(r"(?P<head>(?P<name>[\w.-]+)['\"]?\s*[:=]\s*\[)(?P<items>[^\[\]]*)\]")
_LIST_ITEM = re.compile(r"(?P<lead>\s*)(?P<item>[^,]*?)(?P<trail>\s*)(?=,|$)")
_BARE_ASSIGN = re.compile(r"(?P<head>(?P<name>[\w.-]+)=)(?P<value>[^\s,;&?='\")\]}\[]+)")
_BEARER = re.compile(r"(?P<head>\bBearer\s+)(?P<value>[^\s'\",;]+)", re.I)
# An inherited variable is a secret by these endings only: the plain word rule on a whole
# environment (SSH_AUTH_SOCK, a path in GIT_AUTHOR_*) would blank ordinary words in every line.
_SECRET_ENV_NAME = re.compile(
    r"(^|_)(TOKEN|API_KEY|SECRET|PASSWORD|PASSWD)$|^(HF_TOKEN|HUGGING_FACE_HUB_TOKEN)$", re.I
)


def secret_name(name: str) -> bool:
    """Whether an option or variable by this name carries a secret (`--hf-token`, `HF_TOKEN`, `api_key`)."""
    bare = name.lstrip("-").lower().replace("_", "-")
    if bare in _HARMLESS_NAMES:
        return False
    return bool(_SECRET.search(_HARMLESS_WORDS.sub("", bare)))


def _option(arg: str) -> bool:
    """An option, not a value: a negative number is a value, as argparse reads it."""
    return arg.startswith("-") and len(arg) > 1 and not re.fullmatch(r"-\d[\d.e+-]*", arg)


def _secret_values(argv: Sequence[str]) -> Iterable[tuple[int, str]]:
    """(index, value) of every argument that is a secret value: `--x=VALUE` yields its index too."""
    hide = 0  # values still to hide after a secret option; -1: every value up to the next option
    for i, arg in enumerate(argv):
        if hide and not _option(arg):
            yield i, arg
            hide = hide - 1 if hide > 0 else -1
            continue
        hide = 0
        if not _option(arg):
            continue
        name, eq, value = arg.partition("=")
        if not secret_name(name):
            continue
        if eq:
            yield i, value
        else:
            hide = -1 if name.lstrip("-").lower().replace("_", "-") in _MANY_VALUES else 1


def redact_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The argv with secret values (`--api-key V`, `--hf-token=V`, URL passwords) blanked, for
    screens, logs, the journal and the registry. A secret option followed by another option (a
    flag, or `--hf-token` alone, which means "the cached token") hides nothing."""
    out = [redact_text(arg) for arg in argv]
    for i, _ in _secret_values(argv):
        name, eq, _ = argv[i].partition("=")
        out[i] = f"{name}={MASK}" if eq and _option(argv[i]) else MASK
    return tuple(out)


def blanked_options(argv: Sequence[str]) -> tuple[str, ...]:
    """The secret options whose value is the mask itself (`--api-key ***`): text read back from
    where it was stored redacted, which must never reach an engine as its key."""
    names = []
    for i, value in _secret_values(argv):
        if value == MASK:
            name = argv[i].partition("=")[0] if _option(argv[i]) else _owner(argv, i)
            names.append(name)
    return tuple(dict.fromkeys(names))


def _owner(argv: Sequence[str], i: int) -> str:
    """The option a value at ``i`` belongs to: the nearest option before it."""
    return next((argv[j] for j in range(i - 1, -1, -1) if _option(argv[j])), "")


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with secret-named variables blanked and URL passwords cut from the rest."""
    return {k: (MASK if secret_name(k) else redact_text(v)) for k, v in env.items()}


def _url_passwords(text: str) -> list[str]:
    return [m["pw"] for m in _URL_PASSWORD.finditer(text) if m["pw"] != MASK]


def _blank_assignment(match: re.Match) -> str:
    value = match["value"]
    if not secret_name(match["name"]) or value in ("", MASK, "None", "True", "False"):
        return match[0]
    return match["head"] + MASK + match[0][len(match["head"]) + len(value) :]


def _blank_item(match: re.Match) -> str:
    """One item of a secret list: its value blanked, its quotes and spacing kept."""
    item = match["item"]
    if item in ("", MASK, "None") or item.strip("'\"") == MASK:
        return match[0]
    quote = item[0] if item[0] in "'\"" and len(item) > 1 and item[-1] == item[0] else ""
    return match["lead"] + quote + MASK + quote + match["trail"]


def _blank_list(match: re.Match) -> str:
    if not secret_name(match["name"]):
        return match[0]
    return match["head"] + _LIST_ITEM.sub(_blank_item, match["items"]) + "]"


def redact_text(text: str) -> str:
    """Free text (a log line, a diagnosis) with URL passwords and secret-named assignments
    (`api_key='V'`, `"hf_token": "V"`, `HF_TOKEN=V`, `'api_key': ['V']`) blanked."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _BEARER.sub(lambda m: m["head"] + MASK if m["value"] != MASK else m[0], text)
    text = _LIST_ASSIGN.sub(_blank_list, text)
    text = _QUOTED_ASSIGN.sub(_blank_assignment, text)
    return _BARE_ASSIGN.sub(_blank_assignment, text)


def shell_line(argv: Sequence[str]) -> str:
    """The printed argv: redacted and shell-quoted, so pasting it runs exactly that command."""
    return shlex.join(redact_argv(argv))


def _shown_word(word: str) -> str:
    """A redacted word as the prompt reads it back: a blanked value shows bare (`***`,
    `--hf-token=***`), anything else shell-quoted."""
    name, eq, value = word.rpartition("=")
    if word == MASK or (eq and value == MASK and name and shlex.quote(name) == name):
        return word
    return shlex.quote(word)


def shown_words(words: Sequence[str]) -> str:
    """Server arguments as shown and stored (a layout's knobs): secret values blanked, the rest
    quoted as the prompt splits them, so the text reads back into the same words."""
    return " ".join(_shown_word(word) for word in redact_argv(words))


def redact_line(text: str) -> str:
    """A typed line (`try tp4 --api-key V`) with its secret values blanked; a line without one
    is kept exactly as typed. A line the shell rules cannot split is split at spaces."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    if redact_argv(words) == tuple(words):
        return redact_text(text)
    return ", ".join(shown_words(group) for group in _comma_groups(words))


def _comma_groups(words: Sequence[str]) -> list[list[str]]:
    """The words of a line in its comma-separated parts (`sweep tp4 --api-key V, tp8`): a key
    that takes several values ends at the comma, so the next layout is not taken for one."""
    groups: list[list[str]] = [[]]
    for word in words:
        if word.endswith(","):
            groups[-1] += [word[:-1]] if len(word) > 1 else []
            groups.append([])
        else:
            groups[-1].append(word)
    return [group for group in groups if group] or [[]]


def launch_secrets_env(env: Mapping[str, str], inherited: Mapping[str, str]) -> dict[str, str]:
    """What a launch's scrubber looks at: the profile's ``env`` whole, and of the ``inherited``
    environment only the variables named like a credential (HF_TOKEN, *_API_KEY, *_PASSWORD)."""
    picked = {k: v for k, v in inherited.items() if _SECRET_ENV_NAME.search(k)}
    return {**picked, **env}


@dataclass(frozen=True)
class Scrubber:
    """The secret values of one launch, blanked wherever they turn up: an engine prints its own
    arguments (vLLM: `non-default args: {'hf_token': 'V'}`) in words no name rule foresees."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def from_launch(cls, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Scrubber:
        """From the argv and the whole environment the engine gets (inherited HF_TOKEN included)."""
        env = env or {}
        values = [v for _, v in _secret_values(argv)]
        values += [v for k, v in env.items() if secret_name(k)]
        values += [pw for text in (*argv, *env.values()) for pw in _url_passwords(text)]
        kept = {v for v in values if len(v) >= MIN_SECRET and v != MASK}
        return cls(tuple(sorted(kept, key=len, reverse=True)))  # longest first: no half-blanked secret

    def joined(self, other: Scrubber) -> Scrubber:
        """The secrets of both: a launcher keeps those of every launch it made."""
        kept = set(self.secrets) | set(other.secrets)
        return Scrubber(tuple(sorted(kept, key=len, reverse=True)))

    def text(self, line: str) -> str:
        """The line with every known secret value, URL password and secret assignment blanked."""
        for secret in self.secrets:
            line = line.replace(secret, MASK)
        return redact_text(line)

    __call__ = text
