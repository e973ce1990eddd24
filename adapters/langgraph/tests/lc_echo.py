"""A LangChain chat model that is serializable and has a secret, for the runnable snapshot tests.

No chat model shipped with langchain-core is both serializable and offline (its fakes all return
``is_lc_serializable() == False``), so this one stands in for a partner model such as ``ChatOpenAI``:
it declares ``api_key`` in ``lc_secrets`` exactly as they do, and refuses to answer without a key.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.chat_models import SimpleChatModel
from langchain_core.messages import BaseMessage
from pydantic import SecretStr


class EchoChatModel(SimpleChatModel):
    """Answers ``<prefix><last message>``; needs an ``api_key`` starting with ``sk-``."""

    prefix: str = "echo: "
    api_key: SecretStr | None = None

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return True

    @property
    def lc_secrets(self) -> dict[str, str]:
        return {"api_key": "ECHO_API_KEY"}

    @property
    def _llm_type(self) -> str:
        return "echo"

    def _call(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
              **kwargs: Any) -> str:
        if self.api_key is None or not self.api_key.get_secret_value().startswith("sk-"):
            raise PermissionError("EchoChatModel: invalid api_key")
        return self.prefix + " | ".join(str(m.content) for m in messages)


def make_chain(key: str = "sk-test-123") -> Any:
    """A real LCEL chain: ChatPromptTemplate | EchoChatModel | StrOutputParser."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate

    prompt = ChatPromptTemplate.from_messages([("system", "Be {style}."), ("human", "{question}")])
    return prompt | EchoChatModel(prefix="bot> ", api_key=SecretStr(key)) | StrOutputParser()
