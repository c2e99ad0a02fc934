"""Small helpers of ``review.analysis`` that the notebooks' loaders lean on."""

import warnings

import numpy as np
import pandas as pd

from mla_kernels.review.analysis import text


def test_text_reads_missing_as_empty_whatever_the_column_s_dtype():
    # A CSV column with nothing in it reads as float64 NaN, which takes no string fill (a
    # warning under pandas 3, an error under 4): every warning here is an error.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert text(pd.Series([np.nan, np.nan])).tolist() == ["", ""]
        assert text(pd.Series([np.nan, 1.5])).tolist() == ["", "1.5"]
        assert text(pd.Series(["stopped: OOM", None, ""])).tolist() == ["stopped: OOM", "", ""]
        assert text(pd.Series([], dtype=float)).tolist() == []
