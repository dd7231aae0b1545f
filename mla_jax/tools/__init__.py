"""Tools built on mla-jax's public API: the benchmark and its report, the model
benchmark (``model_bench``, its floors in ``model_floors``, its transformers baseline in
``hf_baseline``), the comparison with PyTorch and vLLM, the demo, the loader of vLLM's
kernel, the tiny transformers DeepSeek models of the parity checks (``hf_reference``)
and the command line (``python -m mla_jax demo|compare|bench|model-bench``). The
library never imports them."""
