"""Step keys (invariant 1, derived identities): ``step_key(job key, step name)`` is the key a provider
deduplicates by, so two different (job key, step name) pairs must never share one.

The proof has three parts, each a property below: a key that is not shortened decodes back to its
one (job key, step name); a shortened key is the first 190 characters, ``#`` and the SHA-256 of such
a full key (so two shortened keys meet only on a SHA-256 collision); and no key that is not shortened
has the shape of a shortened one.
"""

from __future__ import annotations

import hashlib
import re

from hypothesis import assume, example, given
from hypothesis import strategies as st

from firesafe.idempotency.keys import MAX_KEY_LENGTH, step_key

SHORTENED = re.compile(r".{190}#[0-9a-f]{64}", re.DOTALL)

#: Text rich in the characters that matter: the separator, the escape, the hash mark, hex digits.
tricky = st.text(alphabet=st.sampled_from("ab/%#2F5f0"), max_size=12)
#: Job keys as check_key admits them (1 to 255 printable characters) and step names of any length.
job_keys = st.one_of(tricky.filter(bool), st.text(st.characters(codec="utf-8"), min_size=1, max_size=255)
                     .filter(str.isprintable))
steps = st.one_of(tricky, st.text(st.characters(codec="utf-8"), max_size=300))
long_keys = st.integers(150, 255).map(lambda n: "k" * n)


def full_key(job_key: str, step: str) -> str:
    """The key before any shortening, as docs/steps.md describes it."""
    return job_key + "/" + step.replace("%", "%25").replace("/", "%2F")


def parse(key: str) -> tuple[str, str]:
    """The (job key, step name) a key that is not shortened was made of: the inverse of full_key."""
    job_key, step = key.rsplit("/", 1)
    return job_key, re.sub("%2F|%25", lambda m: {"%2F": "/", "%25": "%"}[m.group()], step)


def legacy_step_key(job_key: str, step: str) -> str:
    """The format before escaping: keys of steps without '/' or '%' must not change."""
    key = f"{job_key}/{step}"
    if len(key) <= MAX_KEY_LENGTH:
        return key
    return f"{key[:190]}#{hashlib.sha256(key.encode()).hexdigest()}"


def test_a_slash_in_the_job_key_or_the_step_name_does_not_make_two_jobs_share_a_key() -> None:
    # Given job "a" with step "b/c" and job "a/b" with step "c" (both used to be 'a/b/c')
    # Then each has its own key, and a step name without '/' keeps today's format
    assert step_key("a", "b/c") == "a/b%2Fc"
    assert step_key("a/b", "c") == "a/b/c"
    assert step_key("a", "b%2Fc") == "a/b%252Fc"  # an escape written literally is escaped again


def test_long_keys_that_collided_before_shortening_differ_after_it() -> None:
    # Given job "k...k" with step "x/y" and job "k...k/x" with step "y", both over 255 characters
    job_key = "k" * 252
    # Then their shortened keys differ too (the hash is taken over the escaped, one-way form)
    assert step_key(job_key, "x/y") != step_key(job_key + "/x", "y")
    assert len(step_key(job_key, "x/y")) == len(step_key(job_key + "/x", "y")) == MAX_KEY_LENGTH


def test_a_step_name_cannot_borrow_the_shortened_key_of_another_step() -> None:
    # Given a job key of 60 characters, one long step name and the shortened key it gets
    job_key = "j" * 60
    victim = step_key(job_key, "s" * 300)
    assert SHORTENED.fullmatch(victim)
    # When another step is named so that "job key/step name" spells out exactly that shortened key
    forged = victim[len(job_key) + 1:]
    assert full_key(job_key, forged) == victim
    # Then its key is not the victim's: a key of that shape is shortened too
    assert step_key(job_key, forged) != victim
    assert step_key(job_key, forged) == step_key(job_key, forged)


@given(job_keys, steps)
@example("a", "b/c")
@example("a/b", "c")
@example("k" * 255, "")
@example("k" * 253, "%")
def test_every_key_is_at_most_255_characters_and_the_same_every_time(job_key: str, step: str) -> None:
    key = step_key(job_key, step)
    assert 0 < len(key) <= MAX_KEY_LENGTH
    assert key == step_key(job_key, step)


@given(job_keys, steps)
@example("a/b", "c")
@example("%2F", "%/")
@example("k" * 252, "x/y")
def test_a_key_names_its_job_and_step_one_way_only(job_key: str, step: str) -> None:
    key = step_key(job_key, step)
    full = full_key(job_key, step)
    assert parse(full) == (job_key, step)  # the full key decodes back: the unshortened form is injective
    if SHORTENED.fullmatch(key):
        # a shortened key is fixed by the SHA-256 of the (injective) full key
        assert key == full[:190] + "#" + hashlib.sha256(full.encode()).hexdigest()
    else:
        # a key that is not shortened is the full key itself, and never has the shortened shape
        assert key == full and len(key) <= MAX_KEY_LENGTH


@given(st.lists(tricky, min_size=2, max_size=5), st.integers(1, 4), st.integers(1, 4))
def test_one_text_split_into_job_key_and_step_name_two_ways_gives_two_keys(parts: list[str], i: int,
                                                                          j: int) -> None:
    # The same "x/y/z" read as (x, y/z) or (x/y, z): the pairs that a plain join made into one key
    i, j = min(i, len(parts) - 1), min(j, len(parts) - 1)
    a = ("/".join(parts[:i]), "/".join(parts[i:]))
    b = ("/".join(parts[:j]), "/".join(parts[j:]))
    assume(a != b and a[0] and b[0])
    assert step_key(*a) != step_key(*b)


@given(job_keys, steps, job_keys, steps)
@example("a", "b/c", "a/b", "c")
@example("a", "%", "a", "%25")
@example("k" * 252, "x/y", "k" * 252 + "/x", "y")
def test_two_different_jobs_or_steps_never_share_a_key(j1: str, s1: str, j2: str, s2: str) -> None:
    assume((j1, s1) != (j2, s2))
    assert step_key(j1, s1) != step_key(j2, s2)


@given(job_keys, steps.filter(lambda s: "/" not in s and "%" not in s))
@example("refund:o-1", "charge")
@example("orders/o-1", "charge")
@example("k" * 250, "charge")
def test_keys_of_steps_without_slash_or_percent_are_unchanged(job_key: str, step: str) -> None:
    # So jobs in flight across the upgrade hand their provider the same keys as before it
    # (the one exception: a key that has the exact shape of a shortened one, which was ambiguous)
    assume(not SHORTENED.fullmatch(f"{job_key}/{step}"))
    assert step_key(job_key, step) == legacy_step_key(job_key, step)


@given(long_keys, steps, steps)
def test_long_keys_differing_only_past_the_cut_still_differ(job_key: str, s1: str, s2: str) -> None:
    assume(s1 != s2)
    assert step_key(job_key, s1) != step_key(job_key, s2)
