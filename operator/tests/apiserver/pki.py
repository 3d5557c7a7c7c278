"""Throw-away TLS material for a test apiextensions-apiserver, made with the `openssl` CLI.

One CA signs the server's serving certificate (for 127.0.0.1/localhost) and one client
certificate whose organisation is `system:masters`: the apiserver authenticates it against
`--client-ca-file` and that group is always authorised, so no SubjectAccessReview (which would
need a full kube-apiserver) is ever made.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

DAYS = "2"
# EC keys: much faster to generate than RSA, and accepted by Go's TLS stack and by `requests`.
KEY_ALGORITHM = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files written by `make_pki`."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(args: list[str], cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def _signed_cert(directory: Path, name: str, subject: str, extensions: str) -> None:
    """Writes <name>.key and <name>.crt signed by ca.crt, with the given x509v3 extensions."""
    ext_file = directory / f"{name}.ext"
    ext_file.write_text(extensions)
    _openssl(
        ["req", "-new", *KEY_ALGORITHM, "-nodes", "-subj", subject,
         "-keyout", f"{name}.key", "-out", f"{name}.csr"],
        directory,
    )  # fmt: skip
    _openssl(
        ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", DAYS, "-extfile", ext_file.name, "-out", f"{name}.crt"],
        directory,
    )  # fmt: skip


def make_pki(directory: Path) -> Pki:
    """Creates a CA, a serving cert for 127.0.0.1 and a system:masters client cert."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the apiserver tier needs the `openssl` CLI (Debian package openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        ["req", "-x509", "-new", *KEY_ALGORITHM, "-nodes", "-days", DAYS,
         "-subj", "/CN=rlhf-operator-test-ca", "-keyout", "ca.key", "-out", "ca.crt",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        directory,
    )  # fmt: skip
    _signed_cert(
        directory,
        "server",
        "/CN=localhost",
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    _signed_cert(
        directory,
        "client",
        "/O=system:masters/CN=rlhf-operator-test-admin",
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n",
    )
    return Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
    )


def write_kubeconfig(path: Path, server_url: str, pki: Pki) -> Path:
    """A kubeconfig for the system:masters client; used by the apiserver itself and by tests."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": server_url, "certificate-authority": str(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(pki.client_cert),
                    "client-key": str(pki.client_key),
                },
            }
        ],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
