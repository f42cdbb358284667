"""The sampling settings (`tritonrl.models.sampling`): greedy, or the whole distribution."""

from tritonrl.models.sampling import sampling_kwargs


def test_greedy_without_a_temperature():
    assert sampling_kwargs(None) == {"do_sample": False, "repetition_penalty": 1.0}


def test_a_temperature_samples_the_whole_distribution():
    assert sampling_kwargs(0.7) == {"do_sample": True, "temperature": 0.7, "top_k": 0,
                                    "top_p": 1.0, "repetition_penalty": 1.0}  # fmt: skip
