"""Names of torch functions that more than one part of tensor-dap needs to recognise.

Plain strings, no torch import: the language server reads source text with them (it never
imports torch), the agent's rules compare them with the op names it sees.
"""

from __future__ import annotations

import re

#: torch functions (and legacy tensor types) that make a new tensor, on the CPU unless told
#: otherwise: a tensor one of them made can be made on the right device at once
#: (``device=``); the device rules' fix says so
TENSOR_FACTORIES = frozenset(
    [
        "zeros",
        "ones",
        "empty",
        "full",
        "tensor",
        "Tensor",
        "as_tensor",
        "arange",
        "linspace",
        "rand",
        "randn",
        "randint",
        "zeros_like",
        "ones_like",
        "eye",
        "from_numpy",
        "FloatTensor",
        "LongTensor",
    ]
)

#: Tensor methods that change a tensor's dtype and keep its device: ``torch.zeros(3).float()``
#: is still a fresh tensor where its factory put it
DTYPE_CONVERSIONS = frozenset(["float", "double", "half", "long", "int"])

#: factories that make their tensor on the CPU unless given ``device=``, and whose fix is that
#: keyword (the ``_like`` ones follow their input's device; ``from_numpy`` and the legacy
#: ``LongTensor`` take no accelerator device; the legacy float constructors become
#: ``torch.tensor`` in the language server's fix)
CPU_UNLESS_TOLD = TENSOR_FACTORIES - frozenset(
    ["zeros_like", "ones_like", "from_numpy", "LongTensor"]
)


#: ops that take some tensors on the CPU whatever the device of the others, by position: the
#: lengths and batch sizes of packed sequences (``pack_padded_sequence(x, lengths.cpu())``,
#: which PyTorch requires), an RNN run on a packed sequence (``lstm(data, batch_sizes, ...)``),
#: and CTC's targets and lengths (cuDNN wants them on the CPU; PyTorch moves them otherwise)
HOST_ARGUMENTS = {
    "_pack_padded_sequence": (1,),
    "_pad_packed_sequence": (1,),
    "lstm": (1,),
    "gru": (1,),
    "rnn_tanh": (1,),
    "rnn_relu": (1,),
    "ctc_loss": (1, 2, 3),
    # a jagged nested tensor's min and max sequence lengths (kept as the sizes of empty host
    # tensors, on every device)
    "_nested_view_from_jagged": (5, 6),
}
#: of those, the ones a user's code copies to the host for: a packing's lengths, CTC's targets
#: and lengths (a packed RNN's batch sizes come from the packing, not from the user)
HOST_ARGUMENTS_COPIED_FOR = {
    name: HOST_ARGUMENTS[name] for name in ("_pack_padded_sequence", "ctc_loss")
}
#: the keywords those arguments go by
HOST_KEYWORDS = frozenset(
    ("lengths", "batch_sizes", "targets", "input_lengths", "target_lengths")
    + ("min_seqlen", "max_seqlen")
)


#: names of tensors meant to be learned: ViT's ``cls_token`` / ``pos_embedding``, DETR's
#: ``query_embed``, prompt tuning's ``prompts``, a Perceiver's ``latents`` (not ``weight`` or
#: ``bias``: minGPT's causal mask is ``self.bias``). A plain tensor attribute so named is fixed
#: by ``nn.Parameter(...)``, not by ``register_buffer``.
LEARNED_TENSOR_NAME = re.compile(
    r"(^|_)(tokens?|embed|embeds|embedding|embeddings|prompts?|query|queries|latents?)(_|$)"
)
#: factories a learned tensor starts from (a sin/cos table or a loaded array is no such start)
LEARNED_INITIAL_VALUES = frozenset(["zeros", "ones", "randn", "rand", "empty", "full", "normal"])
