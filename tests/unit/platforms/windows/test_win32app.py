"""The Win32 app settings' detection rules: each one reads a value the install writes only after its self-check."""

from __future__ import annotations

from dataclasses import fields

from bundler.platforms.windows.win32app import bundle_app, msi_app
from bundler.shipped.ort_bundle.bundle_info import BundleInfo

KEY = "HKEY_LOCAL_MACHINE\\SOFTWARE\\ort-bundler\\app"


def info() -> BundleInfo:
    values: dict[str, object] = {f.name: None for f in fields(BundleInfo)}
    values.update(name="app", version="1.2.3", platform="win_amd64", python="3.11", python_tag="cp311", manifest={},
                  python_runtime={"kind": "embeddable"})
    return BundleInfo(**values)  # type: ignore[arg-type]


def test_the_msi_app_needs_the_value_msi_finish_writes_after_the_check_besides_the_product_code() -> None:
    app = msi_app(info(), msi_file="app.msi", product_code="{0}", payload_bytes=1, vc_redist_package=None)
    assert app.to_json()["detection"] == [
        {"type": "registry", "keyPath": KEY, "valueName": "CheckedVersion", "detectionType": "string",
         "operator": "equal", "detectionValue": "1.2.3", "check32BitOn64System": False},
        {"type": "msi", "productCode": "{0}", "productVersionOperator": "notConfigured"}]


def test_the_zip_app_reads_version_which_register_writes_only_after_the_check() -> None:
    app = bundle_app(info(), payload_bytes=1, vc_redist_package=None)
    assert [(rule.key_path, rule.value_name, rule.value) for rule in app.detection] == [(KEY, "Version", "1.2.3")]
