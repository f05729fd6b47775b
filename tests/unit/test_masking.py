"""The one masking module (invariant 9): free text, values, URLs, users' own names and patterns.

Given text as errors, logs and URLs hold it; when it is masked; then every secret is gone, the text
around it is intact, and prose that only looks like a pair stays as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from firesafe import App, ConfigError, Mask, masking
from firesafe.masking import MASK, is_secret_name, mask, mask_arguments, mask_text, redact_url

M = MASK
ROOT = Path(__file__).resolve().parents[2]

# (text, what mask_text makes of it)
MASKED = [
    # Authorization headers and bare credentials in prose
    ("Authorization: Bearer abc.def", f"Authorization: Bearer {M}"),
    ("authorization: basic dXNlcjpwYXNz", f"authorization: basic {M}"),
    ("Authorization: Basic abcdefgh", f"Authorization: Basic {M}"),  # after Authorization: whatever it is
    ("Proxy-Authorization:Bearer abc", f"Proxy-Authorization:Bearer {M}"),
    ("got 401 with Bearer abc.def from the API", f"got 401 with Bearer {M} from the API"),
    ('KeyError: "Basic dXNlcjpwYXNz"', f'KeyError: "Basic {M}"'),
    # URL credentials: the user part and the query
    ("connect postgresql://user:pw@db.internal/jobs failed", f"connect postgresql://user:{M}@db.internal/jobs failed"),
    ("postgresql://user:p@ss@host/db?x=1", f"postgresql://user:{M}@host/db?x=1"),
    ("redis://:pw@host:6379/0", f"redis://:{M}@host:6379/0"),
    ("GET https://api.example.com/v2?password=hunter2&user=ann", f"GET https://api.example.com/v2?password={M}&user=ann"),
    ("https://x/?a=1&token=abc&b=2", f"https://x/?a=1&token={M}&b=2"),
    ("url=postgresql://u:pw@h/db next", f"url=postgresql://u:{M}@h/db next"),
    # name=value and name: "value" with a secret name; the text next to the secret stays
    ("call(password=x)", f"call(password={M})"),
    ("password = hunter2 rest", f"password = {M} rest"),
    ('password: "two words" and more', f'password: "{M}" and more'),
    ("{'password': 'two words', 'user': 'ann'}", f"{{'password': '{M}', 'user': 'ann'}}"),
    ('{"api_key": "k1", "secret": "a\\"b", "x": 1}', f'{{"api_key": "{M}", "secret": "{M}", "x": 1}}'),
    ('body={\\"password\\": \\"two words\\"}', f'body={{\\"password\\": \\"{M}\\"}}'),  # JSON inside JSON
    ('password: "unterminated\nnext line', f'password: "{M}\nnext line'),
    ("token:abc", f"token:{M}"),
    ("token: hunter2", f"token: {M}"),
    ("X-Api-Key: k_12345", f"X-Api-Key: {M}"),
    ("Cookie: sessionid=abc123; theme=dark", f"Cookie: {M}; theme=dark"),
    ("Set-Cookie: session=x9; Path=/", f"Set-Cookie: {M}; Path=/"),
    ("note: password=abc here", f"note: password={M} here"),
    # the names added to today's: dsn, cookie, session, jwt, credential, access_key, private_key
    ("DATABASE_DSN='postgresql://u@h/db'", f"DATABASE_DSN='{M}'"),
    ("cookie=a1b2 session_id=s1 jwt=j1 credentials=c1", f"cookie={M} session_id={M} jwt={M} credentials={M}"),
    ("aws_access_key=A1 private_key: 'k'", f"aws_access_key={M} private_key: '{M}'"),
    ("PGPASSWORD=pw passwd=x pwd=y client_secret=z", f"PGPASSWORD={M} passwd={M} pwd={M} client_secret={M}"),
    # values that are secrets whatever names them
    ("id eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2ln ok", f"id eyJ{M} ok"),
    ("key AKIAIOSFODNN7EXAMPLE used", f"key AKIA{M} used"),
    ("ghp_" + "a" * 36 + " and xoxb-1234567890-abc", f"ghp_{M} and xoxb-{M}"),
    ("charge with sk_live_4eC39HqLyjWDarjtT1zdp7dc", f"charge with sk_live_{M}"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nnext",
     f"-----BEGIN RSA PRIVATE KEY-----{M}-----END RSA PRIVATE KEY-----\nnext"),
]

# Prose and code that only look like pairs: left exactly as they are.
UNTOUCHED = [
    "token: anyone",
    "token: anyone.",
    "password: None",
    "the bearer of bad news has a basic understanding of Basic Auth",
    "if token == expected:",
    "if token != expected:",
    "max_tokens=4096 exceeds the limit",
    "author=ann authority: x1 authorized=yes",
    "passed: 12, failed: 1",
    "secretary: Ann",
    "https://example.com:8080/path?page=2",
    "postgresql://postgres@127.0.0.1:5432/test",
    "time 12:30:00 and ratio a=b",
    "password=",
    'password=""',
    '  File "/app/password_reset.py", line 42, in reset',
    "tokenizer: bert, session: started",
]


@pytest.mark.parametrize(("text", "expected"), MASKED)
def test_secrets_in_free_text_are_masked_and_their_surroundings_kept(text: str, expected: str) -> None:
    assert mask_text(text) == expected
    assert mask_text(expected) == expected, "masking twice changes nothing"


@pytest.mark.parametrize("text", UNTOUCHED)
def test_prose_is_not_over_masked(text: str) -> None:
    assert mask_text(text) == text


def test_a_traceback_keeps_its_shape() -> None:
    tb = ('Traceback (most recent call last):\n  File "/srv/app/jobs.py", line 12, in charge\n'
          '    client.post(url, headers={"Authorization": f"Bearer {token}"})\n'
          'RuntimeError: refused: Authorization: Bearer abc.def (dsn=postgresql://app:pw@db/x)\n')
    out = mask_text(tb)
    assert "abc.def" not in out and ":pw@" not in out
    assert out.splitlines()[:3] == tb.splitlines()[:3]
    assert out.endswith(f"RuntimeError: refused: Authorization: Bearer {M} (dsn={M})\n")


@pytest.mark.parametrize("name", ["password", "db_password", "PGPASSWORD", "passwd", "pwd", "passphrase", "token",
                                  "authToken", "access_token", "secret", "client_secret", "api_key", "apiKey",
                                  "X-Api-Key", "authorization", "auth", "oauth_state", "credential", "credentials",
                                  "dsn", "DATABASE_DSN", "cookie", "session", "sessionid", "jwt", "access_key",
                                  "aws_access_key_id", "private_key", "privateKey"])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)
    assert any(hint in name.lower() for hint in masking.NAME_HINTS), "short text without a hint skips the pairs"
    assert mask_text(f"x {name}=v1 y") == f"x {name}={M} y"


@pytest.mark.parametrize("name", ["amount", "user", "order_id", "author", "authority", "authorized", "passed",
                                  "passenger", "max_tokens", "tokenizer", "secretary", "keys", "monkey"])
def test_names_that_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_values_are_masked_by_name_and_by_content() -> None:
    value = {"user": "ann", "dsn": "postgresql://u:pw@h/db", "nested": [{"Cookie": "a=b"}, "Bearer abc.def"],
             "note": 'password: "two words"', "n": 5, "t": ("x", None)}
    assert mask(value) == {"user": "ann", "dsn": M, "nested": [{"Cookie": M}, f"Bearer {M}"],
                           "note": f'password: "{M}"', "n": 5, "t": ["x", None]}
    assert mask_arguments(["u", "pw", "postgresql://a:b@h/d"], {"session": "s", "jwt": "j"},
                          ["user", "password", "url"]) == {
        "user": "u", "password": M, "url": f"postgresql://a:{M}@h/d", "session": M, "jwt": M}


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://app:s3cret@db:5432/jobs", f"postgresql://app:{M}@db:5432/jobs"),
    ("postgresql://app@db/jobs?password=s3cret&schema=q", f"postgresql://app@db/jobs?password={M}&schema=q"),
    ("postgresql://app:s3cret@db/jobs?sslpassword=k&schema=q", f"postgresql://app:{M}@db/jobs?sslpassword={M}&schema=q"),
    ("postgresql://app:pa/ss@db/jobs", f"postgresql://app:{M}@db/jobs"),  # an unescaped '/' in the password
    ("postgresql://app:p@ss#w@db/jobs", f"postgresql://app:{M}@db/jobs"),
    ("postgresql://db:5432/jobs?application_name=a@b", "postgresql://db:5432/jobs?application_name=a@b"),
    ("sqlite:///firesafe.db", "sqlite:///firesafe.db"),
    ("not a url password=x", f"not a url password={M}"),
])
def test_redact_url_hides_the_password_wherever_it_is(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.fixture
def own_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules users add last for the process; each test that adds some gets today's back after it."""
    for name in ("_EXTRA", "_NAME", "_USER"):
        monkeypatch.setattr(masking, name, getattr(masking, name))


@pytest.mark.parametrize("size", [100, 511, 512, 513, 5000])
def test_short_and_long_text_mask_alike(size: int) -> None:
    """Short text is first checked for name hints; long text is not: both find the same secrets."""
    for text in ("attempt=1 outcome=failed " + "x" * size + " password=pw1 state=dead",
                 "a" * size + " Authorization: Basic abcdefgh, api_key: 'k1'"):
        out = mask_text(text)
        assert "pw1" not in out and "abcdefgh" not in out and "k1" not in out
        assert out.startswith(text[:20])


@pytest.mark.usefixtures("own_rules")
def test_users_add_names_and_value_patterns_through_the_app(tmp_path) -> None:
    text = 'iban: "DE89 3704 0044" employee 123-45-6789, ref ACME-7 payer_IBAN=DE1'
    assert mask_text(text) == text and not is_secret_name("payer_iban")
    app = App(f"sqlite:///{tmp_path}/x.db", mask=Mask(names=["iban"], patterns=[r"\b\d{3}-\d{2}-\d{4}\b", "ACME-\\d+"]))
    app.close()
    assert mask_text(text) == f'iban: "{M}" employee {M}, ref {M} payer_IBAN={M}'
    assert mask_text("ok=1 IBAN=DE1") == f"ok=1 IBAN={M}", "a user's name is a hint too (short text)"
    assert mask({"payer_iban": "DE1", "memo": "ssn 123-45-6789"}) == {"payer_iban": M, "memo": f"ssn {M}"}
    assert mask_text("token: anyone") == "token: anyone", "adding rules keeps the built-in ones as they are"


@pytest.mark.usefixtures("own_rules")
def test_names_and_patterns_from_the_environment() -> None:
    extra = Mask.from_env({"FIRESAFE_MASK_NAMES": "iban, tax_id", "FIRESAFE_MASK_PATTERNS": "ACME-\\d+\n(?i:zz\\d)\n"})
    assert extra == Mask(names=["iban", "tax_id"], patterns=["ACME-\\d+", "(?i:zz\\d)"])
    masking.extend(extra)
    assert mask_text("tax_id=1 ref ACME-42 ZZ9") == f"tax_id={M} ref {M} {M}"


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"names": "iban"}, "a list of names"),
    ({"names": [""]}, "not a name"),
    ({"patterns": "x"}, "a list of regular expressions"),
    ({"patterns": ["("]}, "not a regular expression"),
    ({"patterns": ["(?i)acme"]}, "not a regular expression"),  # a global flag inside the one regex
    ({"patterns": ["a*"]}, "matches empty text"),
    ({"patterns": ["(?P<x>a)"]}, "names a group"),
])
def test_a_bad_rule_is_a_config_error(kwargs: dict, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        Mask(**kwargs)


def test_a_bad_rule_in_the_environment_stops_the_app_not_the_import(tmp_path) -> None:
    code = ("from firesafe import App, ConfigError\n"
            "from firesafe.masking import mask_text\n"
            "print(mask_text('password=x'))\n"  # firesafe's own rules still apply meanwhile
            "try:\n    App('sqlite:///x.db')\nexcept ConfigError as exc:\n    print(exc)\n")
    env = {**os.environ, "FIRESAFE_MASK_PATTERNS": "ok-[0-9]\n(", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"password={M}", "$FIRESAFE_MASK_NAMES / $FIRESAFE_MASK_PATTERNS: "
                                        "Mask(patterns=...): '(' is not a regular expression (missing ), "
                                        "unterminated subpattern at position 0); flags go inside it, as (?i:...)"]


def test_app_refuses_a_mask_that_is_not_one(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"firesafe\.Mask"):
        App(f"sqlite:///{tmp_path}/x.db", mask=["iban"])  # type: ignore[arg-type]


@pytest.mark.parametrize("unit", ["password=", "a=", "a:", ":", "password: x1 ", 'password="', "://a:", "Bearer ",
                                  "eyJ", "\\", '\\"', "-----BEGIN RSA PRIVATE KEY-----"])
def test_hostile_text_is_masked_in_linear_time(unit: str) -> None:
    """A 400 KB message made of one unit repeated: masking it takes a fraction of a second, not the
    minutes a pass per separator would (a quadratic mask_text took 500 s for 1 MB of ``password=``)."""
    text = unit * (400_000 // len(unit))
    started = time.perf_counter()
    out = mask_text(text)
    assert time.perf_counter() - started < 3.0
    if "x1" in unit:
        assert out == f"password: {M} " * (len(text) // len(unit))


# Text made of what the rules look for, so that examples hit them often.
PIECES = st.sampled_from(["password", "token", "Authorization", "Bearer ", "Basic ", "dsn", "api_key", "=", ":",
                          ": ", " ", '"', "'", "\\", "://", "@", "/", "?", "&", "x1", "abc.def", "eyJ", "sk_live_",
                          "\n", "\x00", "\udce9", ")", "-----BEGIN RSA PRIVATE KEY-----", "é"])
HOSTILE = st.lists(st.one_of(PIECES, st.text(max_size=5)), max_size=40).map("".join)


@settings(max_examples=400, deadline=None, database=None)
@given(HOSTILE)
def test_any_text_masks_without_raising_and_masking_again_changes_nothing(text: str) -> None:
    once = mask_text(text)
    assert mask_text(once) == once
    assert isinstance(redact_url(text), str)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(alphabet=st.characters(blacklist_characters=':="\'\\'), max_size=200))
def test_text_without_a_separator_or_a_known_shape_is_left_alone(text: str) -> None:
    """No ``:``, ``=`` or quote: only Bearer/Basic credentials and known token shapes could change."""
    assume(not any(w in text for w in ("earer", "asic", "eyJ", "KIA", "SIA", "_", "xox", "-----BEGIN")))
    assert mask_text(text) == text
