"""Secrets in trace metadata: environment variables, tokens, credential-looking values.

Real traces can carry the capturing machine's environment (one published trace had a Hugging
Face token in `metadata.system.env`). Reports never copy metadata; what must be written back
(`annotate` keeps the whole trace) goes through `redact`, and every text we write goes through
`scrub_text` as a last line of defence.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"

# Keys whose whole value is an environment (every variable in it is redacted).
ENV_KEY = re.compile(r"(?i)^(env|environ|environment|env_vars|environment_variables|os_environ)$")
# Keys whose value is a secret by name.
# "token" only as a word of the name (HF_TOKEN, auth_token, tokens), not inside another word:
# `tokenizers` is a package, and its version pin is not a secret.
SECRET_KEY = re.compile(
    r"(?i)((?<![a-z])tokens?(?![a-z])|secret|passw(or)?d|passwd|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
    r"credential|(?<![a-z])auth(?!or)|cookie|session[_-]?id|signature|_key$|^key$)"
)
# Values that look like credentials whatever key holds them.
SECRET_VALUE = re.compile(
    r"hf_[A-Za-z0-9]{10,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|sk-[A-Za-z0-9_\-]{16,}"  # OpenAI-style
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|glpat-[A-Za-z0-9_\-]{16,}"  # GitLab
    r"|AIza[0-9A-Za-z_\-]{30,}"  # Google API key
    r"|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{5,}"  # JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[^-]*-----END [A-Z ]*PRIVATE KEY-----"
)
# `NAME=value` / `NAME: value` inside free text, where NAME is secret-looking.
SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b([A-Z0-9_]*(?:TOKENS?|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)(?:_[A-Z0-9_]*)?)\b"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;\"']+)"
)
BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/\-]{12,}=*")
URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@")


def scrub_text(text: str) -> str:
    """Replace credential-looking substrings of free text."""
    text = SECRET_VALUE.sub(REDACTED, text)
    text = SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def redact(value: Any, key: str | None = None) -> Any:
    """A copy of a JSON value with secrets replaced by "[REDACTED]": every variable of an
    environment mapping, every value under a secret-looking key, and credential-looking text
    anywhere. Structure, keys and non-secret values are kept."""
    if key is not None and ENV_KEY.match(key):
        if isinstance(value, dict):
            return {k: REDACTED for k in value}
        if isinstance(value, list):
            return [REDACTED for _ in value]
        return REDACTED if value not in (None, "") else value
    if (
        key is not None
        and SECRET_KEY.search(key)
        and isinstance(value, (str, int, float))
        and not isinstance(value, bool)
    ):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact(v, k if isinstance(k, str) else None) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value


def is_clean(value: Any) -> bool:
    """True when `redact` would change nothing."""
    return redact(value) == value
