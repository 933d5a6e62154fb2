"""lm-eval's own command line with `moe-emu` registered, for both multi-GPU modes:

    python -m harness.lmeval.lm_eval_cli --model moe-emu \\
        --model_args pretrained=DIR,scheme=nvfp4,parallelize=True --tasks ...          # model parallel
    accelerate launch --multi_gpu --num_processes 2 -m harness.lmeval.lm_eval_cli --model moe-emu \\
        --model_args pretrained=DIR,scheme=nvfp4 --tasks ...                            # data parallel

(`--include_path suites/lm_eval/tasks` adds the bundled tasks.)
"""

from lm_eval.__main__ import cli_evaluate

from harness.lmeval import adapter  # noqa: F401  (registers moe-emu)

if __name__ == "__main__":
    cli_evaluate()
