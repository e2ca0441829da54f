"""Training the orchestrator from its traces: records, exports, rewards, rollouts, SFT, GRPO, OPOD.

Nothing here imports torch at module level except the trainer modules, so
``orchestrion run`` stays fast; the training extra (``pip install 'orchestrion[train]'``)
brings torch, transformers, gguf, peft, trl, accelerate and datasets.
"""
