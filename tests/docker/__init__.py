"""The docker tier (a package, so that its conftest is not the module `conftest`)."""
