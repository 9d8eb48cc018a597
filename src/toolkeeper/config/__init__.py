"""Configuration: what to connect to and how the gateway runs."""

from toolkeeper.config.loader import ConfigError, load_config, parse_config_file, parse_config_text
from toolkeeper.config.model import Config, GatewaySettings, OAuthSettings, ServerConfig

__all__ = [
    "Config",
    "ConfigError",
    "GatewaySettings",
    "OAuthSettings",
    "ServerConfig",
    "load_config",
    "parse_config_file",
    "parse_config_text",
]
