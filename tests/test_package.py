"""The package's front door: `import tfx` stays cheap, each subpackage lends its names lazily, and a
name that is not there says so."""

import subprocess
import sys

import pytest

import tfx


def test_a_subpackage_lends_its_names_from_their_modules():
    from tfx.model import BertConfig, chunked_attention

    assert BertConfig.__module__ == "tfx.model.bert"
    assert chunked_attention.__module__ == "tfx.model.efficient"
    assert "BertConfig" in dir(tfx.model) and "bert" in dir(tfx.model)
    assert tfx.model.bert.BertConfig is BertConfig  # a module of the package, by attribute


def test_an_unknown_name_is_an_attribute_error_naming_the_package():
    with pytest.raises(AttributeError, match="'tfx.model' has no attribute 'BertConfg'"):
        tfx.model.BertConfg  # noqa: B018
    with pytest.raises(AttributeError, match="'tfx' has no attribute 'modle'"):
        tfx.modle  # noqa: B018


def test_a_name_that_is_also_a_module_is_refused():
    with pytest.raises(ValueError, match=r"names \['bert'\] are also modules"):
        tfx.lazy_exports("tfx.model", {"bert": ["bert"]})


def test_importing_tfx_and_a_subpackage_loads_no_module_of_it():
    code = (
        "import sys, tfx, tfx.book, tfx.learn; "
        "print(sorted(m for m in sys.modules if m.startswith(('tfx.', 'matplotlib'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tfx.book', 'tfx.learn']", out.stdout + out.stderr
