"""Secret redaction: the reviewed regex set, detect-secrets' plugins, and what must survive."""

from __future__ import annotations

import json
import re

import blake3
import pytest

from workers.stages.redact import SecretMemory, redact, redact_with_findings, scrub_rows

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
        "return console.input(prompt, password=password, stream=stream)",
        "connect(host=host, password=password)",
        "    repo_type=repo_type,\n    token=token\n)",
        "If `token=True` and no token is stored, `permissions: id-token: write`.",
        'return {**image, "credentials": credentials}',
        "secret_type = 'AWS Access Key'",
        "    Token:              '#f8f8f2 bg:#272822',",
        "        token\n        _set_active_token(token_name, add_to_git_credential)",
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


# --- values with no label, found by their shape -------------------------------------------

AWS_SECRET = "OLTmUuRNp/I3DZ4mDicTZVCko6bQf1wMMy+LEj/S"  # 40 random base64 characters
# A PKCS#8 private key's first body line (its DER header, then key bytes) and a later line.
PEM_FIRST = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
PEM_LATER = "Mzv/Lh2uJ7dxOfYrq5XdWbJpHcwK8yM4vUz9sGQXtRmDn1KqLfE+o3PiA6gN0wBj"

UNLABELLED: dict[str, tuple[str, str]] = {
    "aws_secret_in_prompt": (f"use this one: {AWS_SECRET} and retry", AWS_SECRET),
    "aws_secret_after_id": (f"AKIAZ3MHQ4N7PL2XW5RT\n{AWS_SECRET}\n", AWS_SECRET),
    "aws_secret_ending_a_sentence": (f"The secret is {AWS_SECRET}.", AWS_SECRET),
    "pem_body_without_begin": (f"paste:\n{PEM_FIRST}\n{PEM_LATER}\nthanks", PEM_LATER),
    "pem_in_json_string": (
        '{"private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + PEM_FIRST
        + "\\n"
        + PEM_LATER
        + '\\n-----END PRIVATE KEY-----\\n", "client_email": "a@b.iam.gserviceaccount.com"}',
        PEM_LATER,
    ),
    "pem_as_code_string": (
        'KEY = (\n    "-----BEGIN RSA PRIVATE KEY-----\\n"\n'
        f'    "{PEM_FIRST}\\n"\n    "{PEM_LATER}\\n"\n    "-----END RSA PRIVATE KEY-----"\n)\n',
        PEM_LATER,
    ),
    "slack_app_token": (
        "SLACK_APP=xapp-1-A0123456789-1234567890123-abcdef0123456789abcdef",
        "xapp-1-A0123456789-1234567890123-abcdef0123456789abcdef",
    ),
    "stripe_webhook": (
        "signing secret whsec_Q2hhbmdlTWVQbGVhc2UxMjM0NTY3ODkw",
        "whsec_Q2hhbmdlTWVQbGVhc2UxMjM0NTY3ODkw",
    ),
    "gitlab": ("remote glpat-Xy9aBc3DeF4gHi5JkL6m", "glpat-Xy9aBc3DeF4gHi5JkL6m"),
}


@pytest.mark.parametrize("name", sorted(UNLABELLED))
def test_unlabelled_secret_is_replaced(name: str) -> None:
    text, secret = UNLABELLED[name]
    out = redact(text)
    assert secret not in out
    assert "[REDACTED:" in out


def test_unlabelled_shapes_name_their_type() -> None:
    assert redact(f"try {AWS_SECRET}") == "try [REDACTED:aws-secret-key]"
    assert redact(f"{PEM_FIRST}\n{PEM_LATER}\nok") == "[REDACTED:private-key]\n\nok"


@pytest.mark.parametrize(
    "text",
    [
        # git SHAs, lower and upper case; a UUID; content hashes
        "9fceb02d0ae598e95dc970b74767f19372d61af8",
        "HEAD is 9FCEB02D0AE598E95DC970B74767F19372D61AF8 now",
        "id 37f83ec9-f2ea-42a9-925e-0d5c105cb6e8",
        "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
        # lockfile integrity strings (SHA-512 and SHA-1, base64)
        '"integrity": "sha512-Zr0yAx+9sQs4cS9lUE4k2HMXrKQmOWxlTmZpdHZTeX7Xmz8MwXcnF4u9rC'
        'r6l8VnZk4z7kYQe6C3uYkJzVd4Xw=="',
        '"integrity": "sha1-2YfG8bqYtHnXj1m0ZkUJ9v8pQw4="',
        # a base64 fixture: one long line, and the same wrapped at 76 columns
        "data = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6k"
        "gAAAABJRU5ErkJggg=='",
        "QmFzZTY0IHRlc3QgZml4dHVyZSBkYXRhIHRoYXQgaXMgbm90IGEgc2VjcmV0IGF0IGFsbCwganVz\n"
        "dCBzb21lIHRleHQgZW5jb2RlZCBmb3IgYSB0ZXN0IGNhc2UgaW4gYSByZXBvc2l0b3J5Lg==\n",
        # a certificate and a public key body are not private
        "MIIDdzCCAl+gAwIBAgIJAJ9uB4xq8ZJtMA0GCSqGSIb3DQEBCwUAMFIxCzAJBgNV",
        "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo",
        # 40 characters that are a name, or a path
        "AbstractSingletonProxyFactoryBeanImpl2x",
        "class AbstractSingletonProxyFactoryBean20Impl: pass",
        "see src/components/Button/index/render12",
        # code naming a PEM's first and last lines: nothing between them is a key
        '_BEGIN = b"-----BEGIN PRIVATE KEY-----"\nparse_body(data)\n'
        '_END = b"-----END PRIVATE KEY-----"',
    ],
)
def test_hashes_lockfiles_and_fixtures_are_kept(text: str) -> None:
    out = redact(text)
    if "BEGIN PRIVATE KEY" in text:  # the BEGIN line alone is redacted, the code is not
        assert "parse_body(data)\n_END = " in out
    else:
        assert out == text


def test_line_numbers_survive_redaction() -> None:
    code = f'A = 1\nKEY = """\n{PEM}\n"""\nPASSWORD = "pa55-w0rd!"\ndef f():\n    return A\n'
    out = redact(code)
    assert out.count("\n") == code.count("\n")
    assert out.splitlines()[8:] == code.splitlines()[8:]  # `def f` is where it was
    assert out.splitlines()[7] == 'PASSWORD = "[REDACTED:env-secret]"'


# --- a value found once ---------------------------------------------------------------------


def test_a_value_found_once_is_redacted_where_it_appears_again() -> None:
    memory = SecretMemory("transcript.jsonl")
    assert redact("DB_PASSWORD=Tr0ub4dor&3x", memory) == "DB_PASSWORD=[REDACTED:env-secret]"
    assert redact(f"{PEM}", memory).startswith("[REDACTED:private-key]")
    # later, alone, unlabelled, in another text
    assert redact("it is Tr0ub4dor&3x, right?", memory) == ("it is [REDACTED:env-secret], right?")
    assert redact('{"pw": "Tr0ub4dor&3x"}', memory) == '{"pw": "[REDACTED:env-secret]"}'
    body_line = PEM.splitlines()[2]
    assert redact(f"line two was\n{body_line}\n", memory) == (
        "line two was\n[REDACTED:private-key]\n"
    )
    # without the memory, the bare value is not a secret to the detector
    assert redact("it is Tr0ub4dor&3x, right?") == "it is Tr0ub4dor&3x, right?"


def test_the_memory_holds_fingerprints_not_values() -> None:
    memory = SecretMemory("t.jsonl")
    redact(f"AWS_SECRET_ACCESS_KEY={AWS_SECRET} and password: 'correct-horse-9'", memory)
    saved = json.dumps(memory.fingerprints)
    assert AWS_SECRET not in saved and "correct-horse-9" not in saved
    assert sorted(memory.fingerprints.values()) == ["aws-secret-key", "env-secret"]
    assert all(re.fullmatch(r"\d+:[0-9a-f]{8}", fp) for fp in memory.fingerprints)
    # restored from what was saved, it still knows them; another salt does not
    again = SecretMemory("t.jsonl", json.loads(saved))
    assert redact("correct-horse-9", again) == "[REDACTED:env-secret]"
    assert redact("correct-horse-9", SecretMemory("other.jsonl", json.loads(saved))) == (
        "correct-horse-9"
    )


def test_plain_words_are_not_remembered() -> None:
    memory = SecretMemory("t")
    redact('token = "Bearer"\npassword = "password"', memory)
    assert memory.fingerprints == {}
    assert redact("Bearer password", memory) == "Bearer password"


# --- scrubbing rows stored by an earlier version -------------------------------------------


def test_scrub_rows_redacts_stored_text_and_drops_its_vectors() -> None:
    chunks = [
        {
            "id": "c1",
            "project": "p",
            "path": "config.py",
            "start_line": 1,
            "content": f'AWS_SECRET = "{AWS_SECRET}"\nDEBUG = True',
            "content_hash": "old",
            "embedding": [0.1, 0.2],
            "embedding_model": "m",
        },
        {
            "id": "c2",
            "project": "p",
            "path": "config.py",
            "start_line": 3,
            "content": f"# the key again: {AWS_SECRET}",
            "content_hash": "old2",
        },
        {"id": "c3", "project": "p", "path": "util.py", "content": "def f():\n    return 1\n"},
        {"id": "c4", "project": "p", "path": "deploy/.env", "content": "X=1"},
    ]
    done = scrub_rows("code_chunk", chunks, [".env"])
    assert done.deletes == ["c4"]
    assert done.reindex == {("p", "config.py")}
    first, second = done.updates
    assert first == {
        "id": "c1",
        "content": 'AWS_SECRET = "[REDACTED:aws-secret-key]"\nDEBUG = True',
        "embedding": None,
        "content_hash": blake3.blake3(first["content"].encode()).hexdigest(),
    }
    assert second["content"] == "# the key again: [REDACTED:aws-secret-key]"

    memories = [  # the second one repeats the first's password alone: same session
        {"id": "m2", "session": "s", "seq": 2, "content": "retry with Tr0ub4dor&3x"},
        {"id": "m1", "session": "s", "seq": 1, "content": "PGPASSWORD=Tr0ub4dor&3x psql"},
        {"id": "m3", "session": "s", "seq": 3, "content": "nothing here"},
    ]
    done = scrub_rows("memory", memories)
    assert [u["id"] for u in done.updates] == ["m1", "m2"]
    assert done.updates[1] == {
        "id": "m2",
        "content": "retry with [REDACTED:env-secret]",
        "embedding": None,
    }
    state = {"parser": {"pending": {"c": {"targets": [{"detail": f"echo {AWS_SECRET}"}]}}}}
    [cursor] = scrub_rows("transcript_cursor", [{"id": "t", "state": state}]).updates
    assert cursor["state"]["parser"]["pending"]["c"]["targets"][0]["detail"] == (
        "echo [REDACTED:aws-secret-key]"
    )
    assert scrub_rows("memory", [{"id": "m", "session": "s", "content": "ok"}]).updates == []
