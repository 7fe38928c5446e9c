"""Where ResourceManager() finds the portal's address and token when the script names neither.

In order: the arguments, the environment (GPU_PORTAL_URL, GPU_PORTAL_TOKEN), then the file
`gpu-portal login` writes: $GPU_PORTAL_CONFIG, else $XDG_CONFIG_HOME/gpu-portal/config.toml, else
~/.config/gpu-portal/config.toml. The file's token is only ever sent to the file's own portal: with
GPU_PORTAL_URL naming another one, a token must come from the environment or the arguments.
"""

import os
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gpu_portal_sdk.errors import ConfigurationError

URL_ENV = "GPU_PORTAL_URL"
TOKEN_ENV = "GPU_PORTAL_TOKEN"
CONFIG_ENV = "GPU_PORTAL_CONFIG"


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str


def portal_root(url: str) -> str:
    """The portal's address without a trailing slash or /api/v1: the same portal, however written."""
    return url.strip().rstrip("/").removesuffix("/api/v1")


def config_path() -> Path:
    if explicit := os.environ.get(CONFIG_ENV):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "gpu-portal" / "config.toml"


def resolve(url: str | None = None, token: str | None = None) -> Credentials:
    """The address and token to use; ConfigurationError naming what is missing and where it looked."""
    url = url or os.environ.get(URL_ENV)
    token = token or os.environ.get(TOKEN_ENV)
    if url and token:
        return Credentials(portal_root(url), token)
    path = config_path()
    saved = read_config(path)
    url = url or saved.get("url")
    if not url:
        raise ConfigurationError(
            f"No portal address: set {URL_ENV} and {TOKEN_ENV}, pass them to ResourceManager(url, token), "
            f"or run `gpu-portal login` (nothing saved in {path})."
        )
    if token:
        return Credentials(portal_root(url), token)
    if not saved.get("token"):
        raise ConfigurationError(
            f"No API token for {portal_root(url)}: pass token=, set {TOKEN_ENV}, or run "
            f"`gpu-portal login` (create a token at {portal_root(url)}/accounts/tokens/)."
        )
    if portal_root(saved.get("url", "")) != portal_root(url):
        raise ConfigurationError(
            f"No API token for {portal_root(url)}: the token in {path} is for {saved.get('url')}. "
            f"Set {TOKEN_ENV}, or run `gpu-portal login --url {portal_root(url)}`."
        )
    return Credentials(portal_root(url), saved["token"])


def read_config(path: Path) -> dict[str, str]:
    """The saved `url` and `token`; {} when there is no file."""
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigurationError(f"Cannot read {path}: {error}. Run `gpu-portal login` again.") from error
    bad = [key for key in ("url", "token") if key in data and not isinstance(data[key], str)]
    if bad:
        raise ConfigurationError(f"{path}: {', '.join(bad)} must be a string. Run `gpu-portal login` again.")
    return {key: data[key] for key in ("url", "token") if key in data}


def write_config(path: Path, url: str, token: str) -> None:
    """Save the address and token, readable by the owner only (0600, directory 0700). The file is
    replaced whole, so a reader never sees half of it and an older, wider mode does not survive."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = (
        "# Written by `gpu-portal login`; remove with `gpu-portal logout`.\n"
        f"url = {_toml_string(portal_root(url))}\n"
        f"token = {_toml_string(token)}\n"
    )
    handle, scratch = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".toml")  # mode 0600
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


def remove_config(path: Path) -> bool:
    """Forget the saved token; False when there was nothing to remove."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _toml_string(value: str) -> str:
    """A TOML basic string: backslash, quote and control characters escaped."""
    escaped = []
    for char in value:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'
