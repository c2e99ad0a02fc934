"""The tiling scripts' command-line candidates: parsed into checked blockings, a malformed
or disallowed one refused with the argument named before anything runs."""
import pytest

from mla_kernels.context.attention import Blocking
from mla_kernels.lab.tilings import blockings, points


def test_tiles_parse_into_blockings():
    assert blockings(["128,32,8,3", "64, 16, 4, 1", "128,32,4,3,tma"]) == [
        Blocking(128, 32, 8, 3), Blocking(64, 16, 4, 1), Blocking(128, 32, 4, 3, tma=True)]


@pytest.mark.parametrize("spec", ["128,32,8", "128,32,8,3,1", "128,x,8,3", "", "-64,32,4,3",
                                  "128,32,8,3,tma,tma", "128,32,8,tma"])
def test_malformed_tiles_are_named(spec):
    with pytest.raises(ValueError, match=r"^tiles: expected block_m,block_n,num_warps,"
                                         rf"num_stages\[,tma\], got {spec!r}"):
        blockings([spec])


@pytest.mark.parametrize(("spec", "field", "value"), [("96,32,8,3", "block_m", "96"),
                                                      ("128,256,8,3", "block_n", "256"),
                                                      ("128,32,2,3", "num_warps", "2"),
                                                      ("128,32,8,0", "num_stages", "0")])
def test_disallowed_tiles_name_the_field(spec, field, value):
    with pytest.raises(ValueError, match=rf"blocking\.{field}.*{value}"):
        blockings([spec])


def test_points_parse():
    assert points(["32000:128", "4096:512"]) == [(32000, 128), (4096, 512)]
