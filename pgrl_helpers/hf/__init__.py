"""The Hugging Face side (pip extra ``trl``: transformers, trl, peft): what the core is checked
against and what it scales to.

* ``trl_config``: our ``TrainConfig`` -> TRL's ``GRPOConfig`` (needs only the core)
* ``trl_bridge``, ``trl_objectives``: a tiny GPT-2 and tokenizer for notebook 09; our objective
  family checked against TRL's ``GRPOTrainer`` loss types (notebook 11)
* ``hf_policy``: that GPT-2 as a ``Policy`` for our loop (notebook 09)
* ``checkpoint``: notebook 14's toy SFT checkpoint, its splits and KV-cache sampler
* ``real_lm``: notebook 16's SmolLM2-135M-Instruct: the model files, generation with prefix
  sharing, ``ChatLMPolicy``; ``real_lm_task``: its sort task in words, splits, rewards and
  reply budget
* ``common``: what those share: ``model_device``, the KV cache (``past_key_values``), the
  right-padded SFT batch, the ``Policy`` methods of a transformer policy

Importing ``pgrl_helpers.hf`` loads nothing; each module imports transformers / trl / peft
inside the functions that need them.
"""
