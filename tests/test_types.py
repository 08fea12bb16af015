import pytest

from adaptive_eval import EvalRequest


@pytest.mark.parametrize("num_items,sample_size,world", [(101, None, 2), (101, 64, 2), (10, 100, 3), (7, 5, 4),
                                                         (1000, 333, 2), (0, 10, 2)])
def test_shards_are_disjoint_and_cover_exactly_the_sample(num_items, sample_size, world):
    shards = [EvalRequest(0, sample_size, 7, "r", rank=r, world_size=world).indices(num_items) for r in range(world)]
    flat = [i for s in shards for i in s]
    expected = min(sample_size, num_items) if sample_size is not None else num_items
    assert len(flat) == len(set(flat)) == expected
    assert all(0 <= i < num_items for i in flat)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    single = EvalRequest(0, sample_size, 7, "r").indices(num_items)
    assert sorted(flat) == sorted(single)


def test_larger_sample_extends_the_same_order():
    small = EvalRequest(0, 50, 3, "r").indices(500)
    large = EvalRequest(5, 200, 3, "r").indices(500)
    assert large[:50] == small


def test_different_seeds_give_different_samples():
    assert EvalRequest(0, 50, 1, "r").indices(500) != EvalRequest(0, 50, 2, "r").indices(500)


@pytest.mark.parametrize("bad", [-1, 2.5, "10", True])
def test_bad_num_items(bad):
    with pytest.raises(ValueError, match="num_items"):
        EvalRequest(0, 5, 0, "r").indices(bad)
