"""Secrets in metadata: environments, secret-named keys and credential-looking text."""

from traceanalyzer.redact import REDACTED, redact, scrub_text

TOKEN = "hf_abcdefghijklmnopqrstuvwxyzABCD1234"


def test_environment_values_are_all_redacted_keys_kept():
    meta = {"system": {"env": {"HF_TOKEN": TOKEN, "PATH": "/usr/bin", "HOME": "/root"}, "gpu": {"gpu_00": "H100"}}}
    out = redact(meta)
    assert out["system"]["env"] == {"HF_TOKEN": REDACTED, "PATH": REDACTED, "HOME": REDACTED}
    assert out["system"]["gpu"] == {"gpu_00": "H100"}


def test_secret_keys_and_credential_text_anywhere():
    meta = {
        "wandb": {"api_key": "0123456789abcdef", "project": "x"},
        "cmdline": f"python train.py --token {TOKEN} WANDB_API_KEY=s3cr3tvalue",
        "url": "https://user:pa55word@example.com/repo",
        "list": ["ghp_" + "a" * 36, "plain"],
        "count": 3,
    }
    out = redact(meta)
    text = repr(out)
    for secret in (TOKEN, "0123456789abcdef", "s3cr3tvalue", "pa55word", "ghp_" + "a" * 36):
        assert secret not in text
    assert out["wandb"]["project"] == "x" and out["list"][1] == "plain" and out["count"] == 3
    assert "WANDB_API_KEY=" + REDACTED in out["cmdline"]


def test_scrub_text_leaves_ordinary_text():
    s = "aten::to > Memcpy HtoD (Pageable -> Device) resnet50.py(42): <module> 12.5 ms"
    assert scrub_text(s) == s


def test_package_pins_are_not_secrets():
    from traceanalyzer.redact import redact, scrub_text

    assert scrub_text("tokenizers=0.15.0 HF_TOKEN=abc") == "tokenizers=0.15.0 HF_TOKEN=[REDACTED]"
    out = redact({"tokenizers": "0.15.0", "author": "me", "hf_token": "x", "auth": "y"})
    assert out == {"tokenizers": "0.15.0", "author": "me", "hf_token": "[REDACTED]", "auth": "[REDACTED]"}
