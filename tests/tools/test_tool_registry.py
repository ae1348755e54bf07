"""initialize_tools_from_config: upstream's tool-config YAML, and an error naming file and entry for each mistake."""

import asyncio
from pathlib import Path

import pytest

from verl.tools.base_tool import BaseTool
from verl.tools.gsm8k_tool import Gsm8kTool
from verl.tools.sandbox_fusion_tools import SandboxFusionTool
from verl.tools.schemas import ToolResponse
from verl.tools.utils.tool_registry import initialize_tools_from_config

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "sglang_multiturn" / "config" / "tool_config"

SCHEMA_YAML = """
    tool_schema:
      type: function
      function:
        name: {name}
        description: d
        parameters: {{type: object, properties: {{x: {{type: string}}}}, required: [x]}}
"""


class EchoTool(BaseTool):
    """A tool with a built-in schema, so its YAML entry may leave tool_schema out."""

    def get_openai_tool_schema(self):
        return {"type": "function", "function": {"name": "echo", "description": "echo x",
                                                 "parameters": {"type": "object", "properties": {}, "required": []}}}

    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text=f"{self.config['prefix']}{parameters.get('x')}"), 0.0, {}


def write(tmp_path, text):
    path = tmp_path / "tools.yaml"
    path.write_text(text)
    return str(path)


def test_bundled_configs_build_the_builtin_tools():
    (gsm8k,) = initialize_tools_from_config(str(CONFIGS / "gsm8k_tool_config.yaml"))
    assert isinstance(gsm8k, Gsm8kTool) and gsm8k.name == "calc_gsm8k_reward"
    assert list(gsm8k.tool_schema.function.parameters.properties) == ["answer"]
    assert gsm8k.tool_schema.function.parameters.required == ["answer"]

    (sandbox,) = initialize_tools_from_config(str(CONFIGS / "sandbox_fusion_tool_config.yaml"))
    assert isinstance(sandbox, SandboxFusionTool) and sandbox.name == "code_interpreter"
    assert sandbox.sandbox_fusion_url == ""  # left for the trainer's local sandbox
    assert (sandbox.num_workers, sandbox.rate_limit, sandbox.default_timeout, sandbox.default_language,
            sandbox.memory_limit_mb) == (10, 10, 30.0, "python", 1024)


def test_config_reaches_the_tool_and_a_class_may_supply_its_schema(tmp_path):
    path = write(tmp_path, f"""
tools:
  - class_name: {__name__}.EchoTool
    config: {{type: native, prefix: "got "}}
  - class_name: {__name__}.EchoTool
    config: {{prefix: ">"}}
{SCHEMA_YAML.format(name="echo2")}
""")
    first, second = initialize_tools_from_config(path)
    assert (first.name, second.name) == ("echo", "echo2")
    assert first.config == {"type": "native", "prefix": "got "} and second.config == {"prefix": ">"}
    response, _, _ = asyncio.run(first.execute("i", {"x": "1"}))
    assert response.text == "got 1"


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ("tools:\n  - config: {type: native}\n", ValueError, r"tools\[0\]: class_name is missing"),
        ("tools:\n  - class_name: no_such_pkg.Tool\n", ImportError, r"tools\[0\].*cannot import module 'no_such_pkg'"),
        ("tools:\n  - class_name: verl.tools.gsm8k_tool.NoTool\n", ImportError, r"tools\[0\].*has no 'NoTool'"),
        ("tools:\n  - class_name: collections.OrderedDict\n", TypeError, r"tools\[0\].*not a subclass of .*BaseTool"),
        ("tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: mcp}\n",
         ValueError, r"tools\[0\].*config.type 'mcp' needs an `mcp:` mapping"),
        ("tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: grpc}\n",
         ValueError, r"tools\[0\].*config.type 'grpc' is unknown"),
        ("tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    tool_schema: {type: function}\n",
         ValueError, r"tools\[0\].*tool_schema is not an OpenAI function schema.*function"),
        ("tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n", ValueError, r"tools\[0\].*no tool schema"),
        ("tools:\n  - class_name: verl.tools.sandbox_fusion_tools.SandboxFusionTool\n    config: {num_workers: 0}\n"
         + SCHEMA_YAML.format(name="code"), ValueError, r"tools\[0\].*config.num_workers must be a positive integer"),
        ("tool:\n  - class_name: x.Y\n", ValueError, "top-level `tools:` list"),
    ],
)
def test_errors_name_the_file_and_entry(tmp_path, body, error, message):
    path = write(tmp_path, body)
    with pytest.raises(error, match=message) as info:
        initialize_tools_from_config(path)
    assert "tools.yaml" in str(info.value)


def test_duplicate_names_and_missing_file(tmp_path):
    entry = f"  - class_name: {__name__}.EchoTool\n    config: {{prefix: ''}}\n"
    with pytest.raises(ValueError, match=r"tools\[1\].*'echo' is already used by tools\[0\]"):
        initialize_tools_from_config(write(tmp_path, "tools:\n" + entry + entry))
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        initialize_tools_from_config(str(tmp_path / "nope.yaml"))
