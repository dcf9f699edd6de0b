"""Drives errand's gateway with OpenAI's own Python client, as a user's program would.

    python3 python_clients.py openai_client.py BASE_URL TOKEN MODEL [STRANGER_TOKEN]

BASE_URL is a deployment's or an agent's OpenAI base URL on the gateway (`.../v1`), TOKEN a
caller allowed to invoke it, STRANGER_TOKEN one that is not. Prints one JSON object: the models
the client lists and retrieves, a completion (its raw body validated strictly as OpenAI's
`ChatCompletion`), a streamed and an async one, and the error class, status, `type` and `code`
the client raises for each refusal. Without STRANGER_TOKEN, BASE_URL is an agent server's own
(`http://ADDRESS/v1`, which serves chat completions only): no models, no callers refused.
"""

import asyncio
import json
import sys

import openai
from openai.types.chat import ChatCompletion

QUESTION = [{"role": "user", "content": "what is up"}]


def client(base, key):
    return openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=30)


def refusal(call):
    try:
        call()
    except openai.APIStatusError as error:
        return {
            "class": type(error).__name__,
            "status": error.status_code,
            "type": error.type,
            "code": error.code,
            "message": error.message,
        }
    return None


async def async_completion(base, token, model):
    async_client = openai.AsyncOpenAI(base_url=base, api_key=token, max_retries=0, timeout=30)
    completion = await async_client.chat.completions.create(model=model, messages=QUESTION)
    await async_client.close()
    return completion.choices[0].message.content


def main():
    base, token, model = sys.argv[1:4]
    stranger = sys.argv[4] if len(sys.argv) > 4 else None
    caller = client(base, token)
    answer = {}
    if stranger is not None:
        answer["models"] = [m.id for m in caller.models.list().data]
        answer["model"] = caller.models.retrieve(model).model_dump()
        answer["missing_model"] = refusal(lambda: caller.models.retrieve("no-such-model"))

    raw = caller.chat.completions.with_raw_response.create(model=model, messages=QUESTION)
    body = raw.http_response.json()
    strict = ChatCompletion.model_validate(body, strict=True)
    answer["completion"] = {
        "content": strict.choices[0].message.content,
        "created": strict.created,
        "usage": strict.usage.model_dump() if strict.usage else None,
        "raw_keys": sorted(body),
    }
    stream = caller.chat.completions.create(model=model, messages=QUESTION, stream=True)
    answer["streamed"] = "".join(
        chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
    )
    answer["async"] = asyncio.run(async_completion(base, token, model))

    answer["refusals"] = {
        "bad_request": refusal(
            lambda: caller.chat.completions.create(
                model=model, messages=[{"role": "robot", "content": "x"}]
            )
        ),
    }
    if stranger is not None:
        answer["refusals"]["unauthenticated"] = refusal(lambda: client(base, "not-a-token").models.list())
        answer["refusals"]["forbidden"] = refusal(
            lambda: client(base, stranger).chat.completions.create(model=model, messages=QUESTION)
        )
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
