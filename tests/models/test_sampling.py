"""The sampling settings (`tritonrl.models.sampling`): greedy, or the `sampling` section's."""

from tritonrl.config import SamplingConfig
from tritonrl.models.sampling import sampling_kwargs, vllm_sampling


def test_greedy_without_a_section():
    assert sampling_kwargs(None) == {"do_sample": False, "repetition_penalty": 1.0}
    assert vllm_sampling(None) == {"temperature": 0.0}


def test_the_defaults_sample_the_whole_distribution():
    assert sampling_kwargs(SamplingConfig(temperature=0.7)) == {
        "do_sample": True, "temperature": 0.7, "top_k": 0, "top_p": 1.0,
        "repetition_penalty": 1.0}  # fmt: skip
    assert vllm_sampling(SamplingConfig(temperature=0.7)) == {"temperature": 0.7, "top_p": 1.0,
                                                              "top_k": 0}  # fmt: skip


def test_the_sections_top_p_and_top_k_are_passed_on():
    narrow = SamplingConfig(temperature=0.6, top_p=0.9, top_k=20)
    assert sampling_kwargs(narrow) == {"do_sample": True, "temperature": 0.6, "top_k": 20,
                                       "top_p": 0.9, "repetition_penalty": 1.0}  # fmt: skip
    assert vllm_sampling(narrow) == {"temperature": 0.6, "top_p": 0.9, "top_k": 20}
