"""`python -m verl.tools.sandbox`: start the local SandboxFusion-compatible sandbox service (see verl.sandbox)."""
