"""Where webhook and Slack channels may send, and the one way they send: never into the portal's own
network (server-side request forgery). A URL's host is resolved and every address it has is checked when
the channel is saved, and again at each send; the send then connects to the address it checked, with no
second lookup a rebinding DNS server could answer differently, keeping the URL's host in the Host header
and, for https, in SNI and the certificate's name check.

Refused: loopback, private, link-local, multicast, reserved, unspecified and other non-global addresses,
IPv4 and IPv6 (an IPv4-mapped or 6to4 IPv6 address is judged by the IPv4 address inside). Hosts named in
NOTIFICATION_ALLOWED_PRIVATE_HOSTS (host names, addresses or networks) are exempt: an operator's own
receivers inside the network."""

import ipaddress
import socket
from urllib.parse import urlsplit

import certifi
import urllib3
from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

CA_CERTS = certifi.where()  # the certificates an https receiver's is checked against, as requests does
ASK = "the portal sends to no address of its own network; an operator can allow the host"


class Refused(Exception):
    """The URL's host is, or resolves to, an address the portal does not send to (or to none)."""


def address_class(address: Address) -> str:
    """What kind of address the portal refuses to send to `address` is ("a loopback address"), or ""."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None:
            kind = address_class(inner)
            return f"{kind} inside an IPv6 address" if kind else ""
    for flag, kind in (
        ("is_unspecified", "an unspecified address"),
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_reserved", "a reserved address"),
        ("is_private", "a private address"),
    ):
        if getattr(address, flag):
            return kind
    return "" if address.is_global else "a non-public address"


def resolve(host: str, port: int) -> list[Address]:
    """The host's addresses, in the resolver's order (an address literal is itself); socket.gaierror when
    the name resolves to nothing."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    found = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
        if address not in found:
            found.append(address)
    return found


def _allowed(host: str, address: Address) -> bool:
    entries = [entry.strip().lower().rstrip(".") for entry in settings.NOTIFICATION_ALLOWED_PRIVATE_HOSTS]
    if host.lower().rstrip(".") in entries:
        return True
    for entry in entries:
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue  # a host name
        if address.version == network.version and address in network:
            return True
    return False


def _refusal(host: str, addresses: list[Address]) -> str:
    for address in addresses:
        kind = address_class(address)
        if kind and not _allowed(host, address):
            shown = host if host == str(address) else f"{host} resolves to {address}, which"
            return f"{shown} is {kind}: {ASK}."
    return ""


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def save_problem(url: str) -> str:
    """Why a channel may not be saved with `url` (a well-formed http(s) URL), or "". A name that resolves
    to nothing now is accepted: each send resolves and checks it again."""
    host, port = _host_port(url)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError):
        return ""
    return _refusal(host, addresses)


def checked_address(url: str) -> Address:
    """The address a send to `url` connects to: the host's first, once every one of them is checked."""
    host, port = _host_port(url)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as error:
        raise Refused(f"{host} does not resolve: {error}") from None
    if not addresses:
        raise Refused(f"{host} does not resolve")
    if problem := _refusal(host, addresses):
        raise Refused(problem)
    return addresses[0]


def post(url: str, *, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
    """POST `body` to `url` at its checked address, without following a redirect; the answer's status.
    Refused, or urllib3's errors, when it cannot be sent."""
    parts = urlsplit(url)
    host, port = _host_port(url)
    address = str(checked_address(url))
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    options = {
        "port": port,
        "timeout": urllib3.Timeout(connect=timeout_s, read=timeout_s),
        "retries": False,
        "maxsize": 1,
    }
    if parts.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            address,
            server_hostname=host,
            assert_hostname=host,
            cert_reqs="CERT_REQUIRED",
            ca_certs=CA_CERTS,
            **options,
        )
    else:
        pool = urllib3.HTTPConnectionPool(address, **options)
    with pool:
        answer = pool.urlopen(
            "POST",
            target,
            body=body,
            headers={"Host": parts.netloc, **headers},
            redirect=False,
            assert_same_host=False,
            preload_content=False,  # only the status counts: a huge answer is never read
        )
        answer.close()
    return answer.status
