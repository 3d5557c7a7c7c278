"""The cluster's CA and the API server's serving certificate, made with the openssl CLI.

Pods verify the API server with the CA at /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
(kopf's and the trainer's in-cluster clients do), so the certificate names every address and
name they use: the node's address on the pod network, loopback, and the `kubernetes` Service's
DNS names.
"""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
)


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {result.stderr}")


def make(directory: Path, addresses: list[str]) -> tuple[Path, ssl.SSLContext]:
    """A fresh CA and server certificate in `directory`; (CA file, server SSL context)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = (
        directory / "apiserver.key",
        directory / "apiserver.csr",
        directory / "apiserver.crt",
    )
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "30",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_crt),
        "-subj",
        "/CN=rlhf-substrate-ca",
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=kube-apiserver",
    )
    alt = ",".join([*(f"IP:{a}" for a in addresses), *(f"DNS:{n}" for n in NAMES)])
    extensions = directory / "apiserver.ext"
    extensions.write_text(
        f"subjectAltName={alt}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_crt),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "30",
        "-out",
        str(crt),
        "-extfile",
        str(extensions),
    )
    for secret in (ca_key, key):
        secret.chmod(0o600)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(crt), str(key))
    return ca_crt, context
