"""The chat template multi-turn tool use is rendered with, shared by SFT traces and rollout.

Tool calling needs a template that (1) puts the tool schemas in the system turn, (2) renders an assistant turn's
``tool_calls`` as ``<tool_call>{json}</tool_call>`` and (3) wraps tool results in ``<tool_response>``: the "hermes"
format that the tool-call parser reads back. Many instruct models' own templates do this (Qwen2.5, Hermes); others
ignore ``tools`` or fail on an assistant turn with empty content (SmolLM2-135M-Instruct, the default model, does
both). For those, ``VERL_HERMES_TEMPLATE`` is a ChatML template with the same layout.

The SFT cold start (``data.chat_template=verl_hermes``) and the rollout
(``actor_rollout_ref.rollout.multi_turn.chat_template``) name the same template, so what a model learns to write in
SFT is exactly what the rollout parses and feeds back.

Every message renders on its own (the text of messages[:k] is a prefix of the text of messages[:k+1]): SFT masks
turns by rendering prefixes, and the agent loop appends tool turns as token deltas without re-tokenizing history.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VERL_HERMES", "VERL_HERMES_TEMPLATE", "CHAT_TEMPLATE_CHOICES", "renders_tools", "resolve_chat_template",
           "named_template"]

VERL_HERMES = "verl_hermes"
CHAT_TEMPLATE_CHOICES = ("auto", "model", VERL_HERMES)

# Jinja; whitespace control is deliberate: "<|im_end|>\n" closes every turn, and the generation prompt is
# "<|im_start|>assistant\n", as in ChatML.
VERL_HERMES_TEMPLATE = (
    "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}"
    "{%- if tools or system -%}"
    "{{ '<|im_start|>system\\n' + system }}"
    "{%- if tools -%}"
    "{{ '\\n\\n' if system else '' }}"
    "{{ '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}"
    "{{ 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools -%}{{ '\\n' + (tool | tojson) }}{%- endfor -%}"
    "{{ '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '"
    " + '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": '"
    " + '<args-json-object>}\\n</tool_call>' }}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' and loop.first -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set fn = call['function'] if call.get('function') else call -%}"
    "{%- set args = fn['arguments'] -%}"
    "{{ '\\n' if (message['content'] or not loop.first) else '' }}"
    "{{ '<tool_call>\\n{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' }}"
    "{{ args if args is string else (args | tojson) }}"
    "{{ '}\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{ '<|im_start|>tool\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

_PROBE_TOOL = {"type": "function", "function": {"name": "verl_probe_tool_7f3a", "description": "probe",
                                                 "parameters": {"type": "object", "properties": {}}}}


def named_template(value: str | None) -> str | None:
    """A bundled template's name -> its Jinja text; anything else (a Jinja string, None) unchanged."""
    return VERL_HERMES_TEMPLATE if value == VERL_HERMES else value


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's own template shows tool schemas and renders a tool-calling assistant turn with empty
    content (what the hermes format needs); False when it ignores them or fails."""
    if getattr(tokenizer, "chat_template", None) is None:
        return False
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "verl_probe_tool_7f3a", "arguments": {}}}]},
                {"role": "tool", "content": "probe-result-91c2"}]
    try:
        text = tokenizer.apply_chat_template(messages, tools=[_PROBE_TOOL], tokenize=False)
    except Exception:  # noqa: BLE001 - any template error means "cannot render tools"
        return False
    return text.count("verl_probe_tool_7f3a") >= 2 and "probe-result-91c2" in text


def resolve_chat_template(tokenizer: Any, choice: str, key: str) -> str | None:
    """The Jinja template to render tool conversations with, or None for the tokenizer's own.

    ``choice``: ``auto`` (the model's template when it renders tools, else verl_hermes), ``model`` (always the
    model's; an error if it cannot render tools) or ``verl_hermes``. ``key`` names the config key in errors."""
    if choice not in CHAT_TEMPLATE_CHOICES:
        raise ValueError(f"{key}={choice!r}: use one of {', '.join(CHAT_TEMPLATE_CHOICES)}")
    if choice == VERL_HERMES:
        return VERL_HERMES_TEMPLATE
    if renders_tools(tokenizer):
        return None
    if choice == "model":
        raise ValueError(f"{key}=model, but the model's chat template does not render tool schemas and tool-calling "
                         f"turns (it ignores `tools` or fails on empty assistant content); set {key}=auto or "
                         f"{VERL_HERMES} to use verl's hermes template")
    return VERL_HERMES_TEMPLATE
