"""Start the sandbox service; the implementation lives in verl.sandbox.server."""

from verl.sandbox.server import main

if __name__ == "__main__":
    main()
