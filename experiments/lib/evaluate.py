"""
The evaluation engine the reports share: a finished run's stage model, rebuilt from its
checkpoint (checkpoint.load_model), run over fixed batches without gradients.

    model, ck = stage_model(run_folder, 1, "prose")      # the model a stage ended with
"""

from checkpoint import load_model, stage_file


def stage_model(folder, stage_index, name, device="cpu"):
    """(GPT in eval mode, checkpoint dict) of stage `stage_index` (`name`) of the run in folder."""
    return load_model(stage_file(folder, stage_index, name), device)
