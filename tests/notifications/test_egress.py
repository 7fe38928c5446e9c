"""Channels never reach the portal's own network: a URL into it is refused when saved, and at each send
on the addresses its host resolves to then (a rebinding DNS server gains nothing); the send connects to
the address it checked, keeping the host name in the Host header, SNI and the certificate check. Hosts
allowed by NOTIFICATION_ALLOWED_PRIVATE_HOSTS are exempt."""

import datetime as dt
import http.server
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.exceptions import ValidationError

from notifications import egress
from notifications.choices import ChannelKind, DeliveryState
from notifications.delivery import deliver_due
from notifications.models import Channel, DeliveryAttempt
from notifications.services import create_channel, send_test, update_channel

REFUSED = [
    ("127.0.0.1", "a loopback address"),
    ("127.8.9.10", "a loopback address"),
    ("10.1.2.3", "a private address"),
    ("172.16.0.1", "a private address"),
    ("192.168.1.1", "a private address"),
    ("169.254.169.254", "a link-local address"),
    ("224.0.0.1", "a multicast address"),
    ("240.0.0.1", "a reserved address"),
    ("0.0.0.0", "an unspecified address"),
    ("100.64.0.1", "a non-public address"),
    ("[::1]", "a loopback address"),
    ("[fe80::1]", "a link-local address"),
    ("[fc00::1]", "a private address"),
    ("[ff02::1]", "a multicast address"),
    ("[::]", "an unspecified address"),
    ("[::ffff:127.0.0.1]", "a loopback address inside an IPv6 address"),
    ("[::ffff:10.0.0.1]", "a private address inside an IPv6 address"),
    ("[2002:7f00:1::]", "a loopback address inside an IPv6 address"),
]


@pytest.fixture
def dns(monkeypatch):
    """A resolver the test answers for the names it sets (others resolve as usual)."""
    names: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in names:
            return real(host, port, *args, **kwargs)
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in names[host]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


@pytest.fixture
def nothing_allowed(settings):
    settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS = []


def add(actor, team, url, kind=ChannelKind.WEBHOOK):
    return create_channel(actor, team=team, kind=kind, name="hook", url=url)[0]


@pytest.mark.parametrize(("host", "kind"), REFUSED)
def test_a_url_into_the_portals_network_is_refused_when_saved(team, team_admin, nothing_allowed, host, kind):
    with pytest.raises(ValidationError) as refused:
        add(team_admin, team, f"https://{host}:8443/hook")

    assert kind in refused.value.message_dict["url"][0]
    assert not Channel.objects.exists()


def test_a_name_resolving_into_the_network_is_refused_naming_the_address(
    team, team_admin, nothing_allowed, dns, api_client
):
    dns["hooks.example.test"] = ["93.184.216.34", "10.0.0.7"]  # one bad address is enough

    answer = api_client(team_admin).post(
        "/api/v1/notification-channels/",
        {"team": team.slug, "kind": "slack", "name": "x", "url": "https://hooks.example.test/x"},
        format="json",
    )

    assert answer.status_code == 400
    assert "hooks.example.test resolves to 10.0.0.7, which is a private address" in str(answer.json())
    assert not Channel.objects.exists()


def test_a_changed_url_is_checked_as_a_new_one(team, team_admin, nothing_allowed, dns):
    dns["hooks.example.test"] = ["93.184.216.34"]
    channel = add(team_admin, team, "https://hooks.example.test/x")

    with pytest.raises(ValidationError, match="link-local"):
        update_channel(channel, actor=team_admin, url="http://169.254.169.254/latest/meta-data/")

    channel.refresh_from_db()
    assert channel.url == "https://hooks.example.test/x"


def test_public_addresses_and_names_that_resolve_to_nothing_yet_are_saved(team, team_admin, nothing_allowed):
    add(team_admin, team, "https://93.184.216.34/hook")
    add(team_admin, team, "https://[2606:2800:220:1:248:1893:25c8:1946]/hook")
    add(team_admin, team, "https://nowhere.invalid/hook")  # checked again at each send

    assert Channel.objects.count() == 3


@pytest.mark.parametrize(
    "allowed", [["hooks.internal.test"], ["HOOKS.internal.test."], ["10.0.0.7"], ["10.0.0.0/8"]]
)
def test_an_allowed_host_may_be_private(team, team_admin, settings, dns, allowed):
    settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS = allowed
    dns["hooks.internal.test"] = ["10.0.0.7"]

    add(team_admin, team, "http://hooks.internal.test:8080/hook")
    with pytest.raises(ValidationError, match=r"192\.168\.0\.1"):  # what the list names, nothing more
        add(team_admin, team, "http://192.168.0.1/hook")


def test_a_host_rebound_to_loopback_after_saving_is_refused_at_send(
    team, team_admin, settings, dns, receiver
):
    settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS = []
    port = receiver.server.server_address[1]
    dns["hooks.example.test"] = ["93.184.216.34"]
    channel = add(team_admin, team, f"http://hooks.example.test:{port}/hook")
    dns["hooks.example.test"] = ["127.0.0.1"]

    send_test(channel, actor=team_admin)
    assert deliver_due() == {DeliveryState.PENDING: 1}

    attempt = DeliveryAttempt.objects.get()
    assert not attempt.ok and attempt.status_code is None
    assert "hooks.example.test resolves to 127.0.0.1, which is a loopback address" in attempt.error
    assert receiver.arrivals == []


def test_a_send_connects_to_the_checked_address_with_the_host_name_in_the_host_header(
    team, team_admin, settings, dns, receiver
):
    settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS = ["hooks.example.test"]
    port = receiver.server.server_address[1]
    dns["hooks.example.test"] = ["127.0.0.1"]
    channel, receiver.secret = create_channel(
        team_admin,
        team=team,
        kind=ChannelKind.WEBHOOK,
        name="hook",
        url=f"http://hooks.example.test:{port}/h",
    )
    resolved = []
    real = egress.resolve

    def counted(host, port):
        resolved.append(host)
        return real(host, port)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(egress, "resolve", counted)
        send_test(channel, actor=team_admin)
        assert deliver_due() == {DeliveryState.DELIVERED: 1}

    assert resolved == ["hooks.example.test"]  # once, by the check; the connection used its answer
    assert [(a["host"], a["verified"]) for a in receiver.arrivals] == [(f"hooks.example.test:{port}", True)]


def _certificate(tmp_path, name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@pytest.fixture
def https_receiver(tmp_path):
    """An https receiver on loopback with a certificate for hooks.example.test only; it records the name
    each client asked for in SNI and the Host header of each POST."""
    cert_file, key_file = _certificate(tmp_path, "hooks.example.test")
    seen = {"sni": [], "host": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen["host"].append(self.headers.get("Host"))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    context.sni_callback = lambda sock, name, ctx: seen["sni"].append(name)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], cert_file, seen
    server.shutdown()
    server.server_close()


def test_https_keeps_the_host_name_for_sni_and_the_certificate(
    team, team_admin, settings, dns, https_receiver, monkeypatch
):
    port, cert_file, seen = https_receiver
    monkeypatch.setattr(egress, "CA_CERTS", str(cert_file))
    settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS = ["127.0.0.1"]
    dns["hooks.example.test"] = ["127.0.0.1"]
    dns["other.example.test"] = ["127.0.0.1"]
    good = add(team_admin, team, f"https://hooks.example.test:{port}/s", kind=ChannelKind.SLACK)
    wrong = add(team_admin, team, f"https://other.example.test:{port}/s", kind=ChannelKind.SLACK)

    send_test(good, actor=team_admin)
    send_test(wrong, actor=team_admin)
    deliver_due()

    by_channel = {a.delivery.channel_id: a for a in DeliveryAttempt.objects.select_related("delivery")}
    assert (by_channel[good.pk].ok, by_channel[good.pk].status_code) == (True, 204)
    assert not by_channel[wrong.pk].ok and "other.example.test" in by_channel[wrong.pk].error
    assert seen["sni"] == ["hooks.example.test", "other.example.test"]
    assert seen["host"] == [f"hooks.example.test:{port}"]
