"""Decrypting an encrypted room's file (pure: nio's attachment crypto, no server)."""

from __future__ import annotations

import pytest
from nio import EncryptionError
from nio.crypto.attachments import encrypt_attachment

from adapters.matrix.convert import EncryptedFileRef
from adapters.matrix.files import decrypt


def sealed(plain: bytes, **changes: str) -> tuple[EncryptedFileRef, bytes]:
    ciphertext, keys = encrypt_attachment(plain)
    values = {"key": keys["key"]["k"], "iv": keys["iv"], "sha256": keys["hashes"]["sha256"]}
    ref = EncryptedFileRef(name="a.txt", source="mxc://x/y", **{**values, **changes})
    return ref, ciphertext


def test_decrypt_opens_what_nio_encrypted() -> None:
    ref, ciphertext = sealed(b"hello secret")
    assert ciphertext != b"hello secret"
    assert decrypt(ref, ciphertext) == b"hello secret"


@pytest.mark.parametrize(
    "changes",
    [{"sha256": "A" * 43}, {"sha256": "!!"}, {"key": ""}, {"key": "short"}, {"iv": "*"}],
)
def test_bad_key_material_raises_encryption_error(changes: dict[str, str]) -> None:
    ref, ciphertext = sealed(b"hello secret", **changes)
    with pytest.raises(EncryptionError):
        decrypt(ref, ciphertext)


def test_tampered_ciphertext_fails_the_hash() -> None:
    ref, ciphertext = sealed(b"hello secret")
    with pytest.raises(EncryptionError):
        decrypt(ref, bytes([ciphertext[0] ^ 1]) + ciphertext[1:])
