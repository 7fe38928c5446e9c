"""Team secrets: set and deleted by the team's admins only, stored encrypted under TEAM_SECRETS_KEYS
(rotatable), audited by name and never by value."""

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured, ValidationError

from audit.models import Event
from infra.env import env_fernet_keys
from teams.crypto import decrypt, encrypt
from teams.models import TeamSecret
from teams.permissions import NotAllowed
from teams.services import delete_team_secret, set_team_secret

VALUE = "hf_s3cret-token-value"


def test_a_team_admin_sets_a_secret_stored_encrypted_and_audited_without_its_value(team, team_admin):
    secret, created = set_team_secret(team, name="HF_TOKEN", value=VALUE, actor=team_admin)

    assert created
    stored = TeamSecret.objects.get()
    assert (stored.team, stored.name, stored.updated_by) == (team, "HF_TOKEN", team_admin)
    assert VALUE not in stored.encrypted_value
    assert decrypt(stored.encrypted_value) == VALUE
    event = Event.objects.get(object_id=secret.pk, content_type__model="teamsecret")
    assert (event.to_state, event.team, event.actor, event.data) == (
        "created",
        team,
        team_admin,
        {"name": "HF_TOKEN"},
    )
    assert VALUE not in f"{event.reason} {event.data}"


def test_setting_a_secret_again_replaces_its_value(team, team_admin):
    set_team_secret(team, name="HF_TOKEN", value=VALUE, actor=team_admin)

    _, created = set_team_secret(team, name="HF_TOKEN", value="a-new-value", actor=team_admin)

    assert not created
    assert decrypt(TeamSecret.objects.get().encrypted_value) == "a-new-value"
    assert list(
        Event.objects.filter(content_type__model="teamsecret").values_list("to_state", flat=True)
    ) == ["created", "replaced"]


@pytest.mark.parametrize("who", ["member", "outsider", "operator"])
def test_only_the_teams_admins_set_or_delete_its_secrets(request, team, team_admin, who):
    actor = request.getfixturevalue(who)
    secret, _ = set_team_secret(team, name="HF_TOKEN", value=VALUE, actor=team_admin)

    with pytest.raises(NotAllowed):
        set_team_secret(team, name="HF_TOKEN", value="their-value", actor=actor)
    with pytest.raises(NotAllowed):
        delete_team_secret(secret, actor=actor)

    assert decrypt(TeamSecret.objects.get().encrypted_value) == VALUE
    assert Event.objects.filter(content_type__model="teamsecret").count() == 1


@pytest.mark.parametrize(
    ("name", "value", "field", "says"),
    [
        ("HF_TOKEN", "abc", "value", "at least 4 characters, so that masking it in job logs"),
        ("HF_TOKEN", "", "value", "at least 4 characters"),
        ("HF_TOKEN", "x" * 4097, "value", "at most 4096 characters (this one has 4097)"),
        ("HF_TOKEN", "abc\x00def", "value", "cannot hold NUL characters"),
        ("HF_TOKEN", "abc\udc80def", "value", "cannot hold lone surrogates"),
        ("HF-TOKEN", VALUE, "name", "'HF-TOKEN' is not a variable name"),
        ("A" * 129, VALUE, "name", "at most 128 characters"),
        ("GPU_PORTAL_NODE_CREDENTIAL", VALUE, "name", "reserved: the node agent sets it for every job"),
        ("HOME", VALUE, "name", "reserved"),
    ],
)
def test_a_bad_secret_is_refused_saying_why_and_nothing_changes(team, team_admin, name, value, field, says):
    with pytest.raises(ValidationError) as refused:
        set_team_secret(team, name=name, value=value, actor=team_admin)

    assert says in " ".join(refused.value.message_dict[field])
    assert not TeamSecret.objects.exists()
    assert not Event.objects.filter(content_type__model="teamsecret").exists()


def test_a_team_holds_at_most_50_secrets_but_may_still_replace_one(team, team_admin):
    for i in range(50):
        set_team_secret(team, name=f"S{i}", value=VALUE, actor=team_admin)

    with pytest.raises(ValidationError) as refused:
        set_team_secret(team, name="ONE_MORE", value=VALUE, actor=team_admin)
    _, created = set_team_secret(team, name="S7", value="replaced", actor=team_admin)

    assert "Vision has 50 secrets, the most a team may have" in refused.value.message_dict["name"][0]
    assert not created
    assert TeamSecret.objects.count() == 50


def test_a_deleted_secret_is_gone_and_the_deletion_audited(team, team_admin):
    secret, _ = set_team_secret(team, name="HF_TOKEN", value=VALUE, actor=team_admin)

    delete_team_secret(secret, actor=team_admin)

    assert not TeamSecret.objects.exists()
    deleted = Event.objects.get(content_type__model="teamsecret", to_state="deleted")
    assert (deleted.object_id, deleted.data, deleted.actor) == (secret.pk, {"name": "HF_TOKEN"}, team_admin)


def test_keys_rotate_the_first_encrypts_and_every_one_decrypts(settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.TEAM_SECRETS_KEYS = [old]
    under_old = encrypt(VALUE)

    settings.TEAM_SECRETS_KEYS = [new, old]
    under_new = encrypt(VALUE)

    assert decrypt(under_old) == decrypt(under_new) == VALUE
    assert Fernet(new.encode()).decrypt(under_new.encode()).decode() == VALUE


def test_without_keys_set_one_is_derived_from_the_secret_key(monkeypatch):
    monkeypatch.delenv("TEAM_SECRETS_KEYS", raising=False)
    monkeypatch.delenv("TEAM_SECRETS_KEYS_FILE", raising=False)

    first = env_fernet_keys("TEAM_SECRETS_KEYS", derive_from="secret-a", purpose=b"team secrets")
    again = env_fernet_keys("TEAM_SECRETS_KEYS", derive_from="secret-a", purpose=b"team secrets")
    other = env_fernet_keys("TEAM_SECRETS_KEYS", derive_from="secret-b", purpose=b"team secrets")

    assert first == again != other
    assert len(first) == 1
    Fernet(first[0])  # a usable key


def test_keys_are_read_comma_separated_or_from_a_file(monkeypatch, tmp_path):
    keys = [Fernet.generate_key().decode() for _ in range(2)]
    monkeypatch.setenv("TEAM_SECRETS_KEYS", f" {keys[0]} , {keys[1]} ")
    assert env_fernet_keys("TEAM_SECRETS_KEYS", derive_from="x", purpose=b"p") == keys

    monkeypatch.delenv("TEAM_SECRETS_KEYS")
    (tmp_path / "keys").write_text(",".join(keys) + "\n")
    monkeypatch.setenv("TEAM_SECRETS_KEYS_FILE", str(tmp_path / "keys"))
    assert env_fernet_keys("TEAM_SECRETS_KEYS", derive_from="x", purpose=b"p") == keys


@pytest.mark.parametrize("bad", ["not-a-key", "c2hvcnQ=", "é" * 44])
def test_a_malformed_key_fails_at_start_naming_its_place_not_its_value(monkeypatch, bad):
    good = Fernet.generate_key().decode()
    monkeypatch.setenv("TEAM_SECRETS_KEYS", f"{good},{bad}")

    with pytest.raises(ImproperlyConfigured) as refused:
        env_fernet_keys("TEAM_SECRETS_KEYS", derive_from="x", purpose=b"p")

    message = str(refused.value)
    assert message.startswith("Key 2 of 2 in TEAM_SECRETS_KEYS is not a Fernet key")
    assert good not in message and bad not in message


def test_keys_set_to_nothing_but_commas_fail_at_start(monkeypatch):
    monkeypatch.setenv("TEAM_SECRETS_KEYS", " , ")

    with pytest.raises(ImproperlyConfigured, match="TEAM_SECRETS_KEYS is set but names no key"):
        env_fernet_keys("TEAM_SECRETS_KEYS", derive_from="x", purpose=b"p")
