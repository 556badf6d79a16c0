"""Secret redaction: the reviewed regex set, detect-secrets' plugins, and what must survive."""

from __future__ import annotations

import pytest

from workers.redact import redact, redact_with_findings

# Fake credentials in the real formats (none of them is live).
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)
SECRETS: dict[str, tuple[str, str]] = {
    # name: (text containing the secret, the secret value that must disappear)
    "anthropic": (
        "export ANTHROPIC=sk-ant-api03-AbCdEf0123456789AbCdEf0123456789-xyzXYZ",
        "sk-ant-api03-AbCdEf0123456789AbCdEf0123456789-xyzXYZ",
    ),
    "openai": (
        "key: sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234abcd",
        "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234abcd",
    ),
    "github": (
        "git clone https://ghp_0123456789abcdefghijABCDEFGHIJ012345@github.com/a/b",
        "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    ),
    "github_pat": (
        "token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123 ok",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123",
    ),
    "aws": ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "slack": (
        "SLACK=xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    ),
    "jwt": (
        "cookie eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    "pem": (
        f"key file:\n{PEM}\ndone",
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    ),
    "env_password": ("DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    "env_secret_quoted": ('CLIENT_SECRET="a b c d e f"', "a b c d e f"),
    "env_api_key": ("OPENAI_API_KEY=abcdef0123456789", "abcdef0123456789"),
    "env_token_json": ('{"access_token": "ya29.A0ARrdaM-abc123"}', "ya29.A0ARrdaM-abc123"),
    "bearer": (
        "curl -H 'Authorization: Bearer abcdef0123456789abcdef0123' https://api.x.io",
        "abcdef0123456789abcdef0123",
    ),
    "url_password": (
        "DATABASE_URL is postgres://admin:s3cretPassw0rd@db.example.com:5432/app",
        "s3cretPassw0rd",
    ),
    # Found by detect-secrets' plugins only.
    "sendgrid": (
        "mail via SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
        "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
    ),
    "stripe": ("charge with sk_live_abcdefghijklmnopqrstuvwx", "sk_live_abcdefghijklmnopqrstuvwx"),
    "keyword": ('db_pass = "correct-horse-battery"', "correct-horse-battery"),
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_is_replaced(name: str) -> None:
    text, secret = SECRETS[name]
    out = redact(text)
    assert secret not in out
    assert "[REDACTED:" in out


def test_types_and_positions_are_reported() -> None:
    text = "a AKIAIOSFODNN7EXAMPLE b"
    out, findings = redact_with_findings(text)
    assert out == "a [REDACTED:aws-access-key] b"
    assert [(f.type, text[f.start : f.end]) for f in findings] == [
        ("aws-access-key", "AKIAIOSFODNN7EXAMPLE")
    ]


def test_pem_block_is_removed_whole_even_when_truncated() -> None:
    # The block's newlines stay, so what follows keeps its line number.
    assert redact(PEM) == "[REDACTED:private-key]\n\n\n"
    truncated = PEM.rsplit("\n", 2)[0]  # no END line: output cut mid-key
    assert "MIIE" not in redact(truncated)


def test_env_name_and_structure_survive() -> None:
    assert redact("DB_PASSWORD=hunter2hunter2\nDEBUG=1") == (
        "DB_PASSWORD=[REDACTED:env-secret]\nDEBUG=1"
    )
    assert redact('password: "pa ss"') == 'password: "[REDACTED:env-secret]"'


def test_url_keeps_user_and_host() -> None:
    assert redact("https://bob:pw123456@example.com/x") == (
        "https://bob:[REDACTED:url-password]@example.com/x"
    )


@pytest.mark.parametrize(
    "text",
    [
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed it",
        "session 37f83ec9-f2ea-42a9-925e-0d5c105cb6e8 ended",
        "blake3 content_hash af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
        "max_tokens: 4096, token_count: 1356, tokens used",
        "env.CODEMIE_API_KEY = apiKeyValue;",
        "apiKey: string | undefined;",
        "token = os.environ['TOKEN']",
        "password = get_password()",
        "the token for the session is refreshed",
        "PASSWORD=${DB_PASSWORD}",
        'Traceback (most recent call last):\n  File "/a/b.py", line 3',
        "",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text


def test_large_text_is_handled() -> None:
    body = "plain log line with nothing secret in it, number 12345\n" * 20000  # ~1 MB
    text = body + "OPENAI_API_KEY=sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234abcd\n" + body
    out = redact(text)
    assert "sk-proj-ABCD" not in out
    assert len(out) < len(text)
